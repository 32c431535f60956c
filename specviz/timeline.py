"""A run as a timeline of steps: what the page reveals, and in which order (docs/design.md §3).

    step 0            after prefill, or the "start" of cycle 1 once a cycle exists
    step 5c + p       cycle c (0-based), phase CYCLE_PHASES[p] for p = 1..5 (draft … rollback)

A cycle's "start" is the previous cycle's rollback. Every view asks `reached(phase, mark)` before
it shows what `mark` reveals, so nothing is shown before its phase. No torch, no Streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence

from .trace import CYCLE_PHASES, CacheSnapshot, CycleTrace, PhaseSnapshot

PHASES_PER_CYCLE = len(CYCLE_PHASES) - 1  # "start" of cycle c+1 is "rollback" of cycle c
VERDICT_GLYPHS = {"accepted": "✓", "rejected": "✗", "untested": "–"}


def phase_index(phase: str) -> int:
    """Index of `phase` in the cycle; -1 for "prefill" and anything outside a cycle."""
    return CYCLE_PHASES.index(phase) if phase in CYCLE_PHASES else -1


def reached(phase: str, mark: str) -> bool:
    """Whether a cycle shown at `phase` is at or past `mark`: what `mark` reveals may be shown."""
    return phase_index(phase) >= phase_index(mark)


def at(step: int, started: bool) -> tuple[int | None, str]:
    """(cycle or None before the first, phase) of a step; step 0 is the start of cycle 1 once the run
    has `started` (holds a cycle it shows), else the prefill."""
    if step == 0:
        return (0, "start") if started else (None, "prefill")
    c, p = divmod(step - 1, PHASES_PER_CYCLE)
    return c, CYCLE_PHASES[p + 1]


def snapshot_at(step: int, prefill: tuple[CacheSnapshot, CacheSnapshot | None], traces: Sequence[CycleTrace],
                started: bool) -> PhaseSnapshot:
    """Both caches' layout at a step (`started` as for `at`)."""
    cycle, phase = at(step, started)
    return PhaseSnapshot("prefill", *prefill) if cycle is None else traces[cycle].snapshot(phase)


def end_of(cycles: int) -> int:
    """The last step of the first `cycles` cycles (the rollback of cycle `cycles` - 1; 0 for none):
    cycle c starts there, and `end_of(c) + 1` shows its draft."""
    return PHASES_PER_CYCLE * cycles
