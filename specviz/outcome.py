"""What a cycle really committed, and what the end of the text cut off — read from its trace.

The textbook arithmetic (a rejection at j commits j tokens, full acceptance K+1; docs/design.md §1)
holds only while the text goes on: the engine cuts the emitted tokens at end-of-text, `max_new_tokens`
and the context's end. The views state the recorded result through `cycle_outcome` (drawn, committed,
cut) and `dropped_entries` (each position a rollback dropped, and why), never a formula that assumes
no cut. Positions are 0-based: x_n at n−1, d_i at n+i−1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .trace import CacheEvent, CycleTrace, DraftStep, EmittedToken

# Each finish reason as a clause: "<reason> — <clause> at position p".
FINISH_WORDS = {
    "eos": "the end-of-text token is committed",
    "max_new_tokens": "the max-new-tokens limit is reached",
    "context_full": "the context is full",
}


@dataclass(frozen=True)
class CycleOutcome:
    """The committed result of one cycle, with the cut made visible."""

    drawn: int  # tokens the acceptance rule produced: the accepted drafts + the corrected/bonus/generated one
    committed: tuple[EmittedToken, ...]  # what was really committed (the trace's `emitted`)
    final: EmittedToken | None  # the token drawn after the tests (corrected, bonus, generated); None: cut
    cut_drafts: tuple[DraftStep, ...]  # accepted drafts that the cut removed (after an end-of-text draft)
    finish_reason: str | None  # "eos" / "max_new_tokens" / "context_full" when this cycle ended the text

    @property
    def cut(self) -> int:
        """How many produced tokens the cut removed (0 when the text goes on)."""
        return self.drawn - len(self.committed)

    @property
    def last(self) -> EmittedToken | None:
        """The newest committed token: the end-of-text token itself when `finish_reason == "eos"`."""
        return self.committed[-1] if self.committed else None


def cycle_outcome(trace: CycleTrace) -> CycleOutcome:
    """What the acceptance rule produced against what was committed: the emitted tokens are the accepted
    drafts and then the drawn token, cut from the end, so the first `len(emitted)` of those survived."""
    accepted = [d for d in trace.drafts if d.verdict == "accepted"]
    final_kind = "generated" if trace.k == 0 else "bonus" if trace.rejected_at is None else "corrected"
    drawn = len(accepted) + 1
    kept = len(trace.emitted)
    final = trace.emitted[-1] if kept == drawn and trace.emitted[-1].kind == final_kind else None
    return CycleOutcome(drawn=drawn, committed=trace.emitted, final=final, cut_drafts=tuple(accepted[kept:]),
                        finish_reason=trace.finish_reason)


@dataclass(frozen=True)
class DroppedEntry:
    """One cache position that a rollback truncation removed."""

    position: int
    name: str  # "x_n" or "d3": whose K/V the slot held
    reason: str  # "rejected", "untested", "cut" (accepted, then cut off) or "newest" (committed, newest token)


@dataclass(frozen=True)
class Truncation:
    """A recorded `truncate` event, with its dropped positions named."""

    length_from: int
    length_to: int
    entries: tuple[DroppedEntry, ...]

    @property
    def count(self) -> int:
        return self.length_from - self.length_to


def dropped_entries(trace: CycleTrace, events: Sequence[CacheEvent], n_after: int) -> list[Truncation]:
    """The rollback truncations among `events`, each position named and explained (`n_after`: the committed
    length after the cycle). A dropped draft entry is not in the sequence (rejected, untested, or accepted
    and cut off) or is the newest committed token, whose K/V the invariant leaves for the next verify."""
    n = trace.context_len
    by_position = {d.position: d for d in trace.drafts}

    def entry(pos: int) -> DroppedEntry:
        d = by_position.get(pos)
        if d is None:
            return DroppedEntry(pos, "x_n" if pos == n - 1 else f"position {pos}", "newest")
        if d.verdict != "accepted":
            return DroppedEntry(pos, f"d{d.index}", d.verdict)  # "rejected" or "untested"
        return DroppedEntry(pos, f"d{d.index}", "newest" if pos < n_after else "cut")

    return [Truncation(e.start, e.end, tuple(entry(pos) for pos in range(e.end, e.start)))
            for e in events if e.kind == "truncate" and e.phase == "rollback"]


def freed_blocks(events: Sequence[CacheEvent]) -> tuple[int, ...]:
    """Physical block ids the rollback returned to the pool, in the recorded order."""
    return tuple(b for e in events if e.kind == "free" and e.phase == "rollback" for b in e.blocks)
