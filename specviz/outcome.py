"""What a cycle really committed, and what the end of the text cut off — read from its trace.

The textbook arithmetic (a rejection at j commits j tokens, full acceptance K+1; docs/design.md §1)
holds only while the text goes on: the engine cuts the emitted tokens at end-of-text,
`max_new_tokens` and the context's end, so an accepted draft can end the text and the drawn
corrected or bonus token is thrown away. The views state the recorded result through this module,
never a formula that assumes no cut: `cycle_outcome` (drawn, committed, cut) and `dropped_entries`
(each position a rollback dropped, and why). Positions are 0-based: x_n at n−1, d_i at n+i−1.
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
    final_kind: str  # "corrected", "bonus" or "generated": the token drawn after the tests
    final: EmittedToken | None  # that token, or None when the cut discarded it
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
    """Compare what the acceptance rule produced with what the trace says was committed.

    The emitted tokens are always the accepted drafts in order followed by the drawn token, cut
    from the end; so the first `len(emitted)` of that list survived and the rest were cut."""
    accepted = [d for d in trace.drafts if d.verdict == "accepted"]
    final_kind = "generated" if trace.k == 0 else "bonus" if trace.rejected_at is None else "corrected"
    drawn = len(accepted) + 1
    kept = len(trace.emitted)
    final = trace.emitted[-1] if kept == drawn and trace.emitted[-1].kind == final_kind else None
    return CycleOutcome(drawn=drawn, committed=trace.emitted, final_kind=final_kind, final=final,
                        cut_drafts=tuple(accepted[kept:]), finish_reason=trace.finish_reason)


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
    out = []
    for e in events:
        if e.kind != "truncate" or e.phase != "rollback":
            continue
        entries = []
        for pos in range(e.end, e.start):
            d = by_position.get(pos)
            name = f"d{d.index}" if d is not None else ("x_n" if pos == n - 1 else f"position {pos}")
            if d is None or (d.verdict == "accepted" and pos < n_after):
                reason = "newest"
            elif d.verdict == "accepted":
                reason = "cut"
            else:
                reason = d.verdict  # "rejected" or "untested"
            entries.append(DroppedEntry(pos, name, reason))
        out.append(Truncation(e.start, e.end, tuple(entries)))
    return out


def freed_blocks(events: Sequence[CacheEvent], phase: str = "rollback") -> tuple[int, ...]:
    """Physical block ids returned to the pool during `phase`, in the recorded order."""
    return tuple(b for e in events if e.kind == "free" and e.phase == phase for b in e.blocks)
