"""Benchmarks that run on their own (load, browser latency) keep one section each in the report.

`docs/benchmarks.md` is written by the suite (`python -m bench`); a benchmark that runs apart from
it puts its table between its own markers, `<!-- name:begin -->` … `<!-- name:end -->`,
replacing the earlier table and leaving every other section as it is, and stores its result under
its name in `docs/benchmarks.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def update_markdown(path: Path, name: str, section: str) -> None:
    """Put `section` into the report at `path` between `name`'s markers (replacing an earlier one)."""
    begin, end = markers(name)
    text = path.read_text() if path.exists() else ""
    block = f"{begin}\n{section}{end}\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block
    path.write_text(text)


def update_json(path: Path, name: str, result: dict[str, Any]) -> None:
    """Store `result` under `name` in the JSON report at `path`, keeping the other entries."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = result
    path.write_text(json.dumps(data, indent=1) + "\n")


# benchmarks with their own command and section
SEPARATE = ("load", "browser_latency", "verify_cost", "verify_kernels", "step_profile", "tree_overhead", "quality",
            "quality_speed", "invariant", "auto_speed", "auto_speed_lookup",
            "match_acceptance")


def read(out_dir: Path, exclude: set[str]) -> dict[str, tuple[str, Any]]:
    """The separate sections (markdown block, JSON result) already in `out_dir`'s report, except
    those in `exclude` (about to be rewritten): a suite run must not erase them."""
    md, js = out_dir / "benchmarks.md", out_dir / "benchmarks.json"
    text = md.read_text() if md.exists() else ""
    data = json.loads(js.read_text()) if js.exists() else {}
    kept = {}
    for name in SEPARATE:
        begin, end = markers(name)
        if name not in exclude and begin in text and end in text and name in data:
            kept[name] = (text.split(begin, 1)[1].split(end, 1)[0].lstrip("\n"), data[name])
    return kept


def write_section(out_dir: Path, name: str, section: str, result: dict[str, Any], report: str = "benchmarks") -> None:
    """One benchmark's section: its markdown into `report`.md and its result into `report`.json."""
    update_markdown(out_dir / f"{report}.md", name, section)
    update_json(out_dir / f"{report}.json", name, result)


def publish(name: str, section: str, result: dict[str, Any], json_path: Path | None = None,
            into: Path | None = None, report: str = "benchmarks") -> None:
    """What a separate benchmark's command ends with: its table printed, its result written to
    `json_path` (when given) and its section put into `into`'s report (when given)."""
    print()
    print(section)
    if json_path:
        json_path.write_text(json.dumps(result, indent=1) + "\n")
    if into:
        write_section(into, name, section, result, report)


def carry_over(kept: dict[str, tuple[str, Any]], out_dir: Path) -> None:
    """Put the sections `read` found back into the freshly written report."""
    for name, (section, result) in kept.items():
        write_section(out_dir, name, section, result)
