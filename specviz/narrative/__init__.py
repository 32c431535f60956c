"""Precise, numbers-filled explanations of each phase of a cycle (shared by the app and the CLI).

Each phase of a recorded `CycleTrace` becomes a short markdown paragraph with the actual numbers:
the tokens fed, p, q, min(1, p/q) and u, the cache entries appended, cut, moved or freed. It
teaches the corrected walkthrough (docs/design.md §1–§2; the corrections are `MISCONCEPTIONS`).
Lengths, entries and positions are quoted from the trace, never from a formula of how the cache
ought to move, so a bookkeeping bug shows (design.md §7, "Numbers from the trace"); its modules: §3.
"""

from .cycle import phase_markdown, prefill_markdown
from .misconceptions import MISCONCEPTIONS, Misconception, misconceptions_markdown
from .summary import explain_law, explain_speedup, status_markdown

__all__ = ["MISCONCEPTIONS", "Misconception", "explain_law", "explain_speedup", "misconceptions_markdown",
           "phase_markdown", "prefill_markdown", "status_markdown"]
