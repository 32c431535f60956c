"""The misconceptions of the common walkthrough, each with its correction (docs/design.md §2).

The app lists them beside the stage ("Myths") so that what the phases show can be checked
against what is usually said about speculative decoding, token trees and their caches. The text
lives in `misconceptions.md` beside this module: a `## claim` heading, then its correction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Misconception:
    claim: str
    correction: str


def _read(path: Path) -> tuple[Misconception, ...]:
    sections = path.read_text(encoding="utf-8").split("\n## ")[1:]  # the first part is the file's comment
    return tuple(Misconception(claim, " ".join(body.split("\n")).strip())
                 for claim, _, body in (s.strip().partition("\n\n") for s in sections))


MISCONCEPTIONS: tuple[Misconception, ...] = _read(Path(__file__).with_name("misconceptions.md"))


def misconceptions_markdown() -> str:
    return "\n".join(f"- ~~{m.claim}~~  \n  {m.correction}" for m in MISCONCEPTIONS)
