"""One cycle's charts, phase by phase, nothing revealed early (docs/design.md §3): q of every draft;
from verify on min(1, p/q) (the draws u and the verdicts from accept on) and p vs q at one draft
position; from resolve on the distribution the extra token was drawn from. A pure function of the
trace, shared by the app's Distributions tab (`ui/tab_charts`), its export and the follower page's
Distributions view (`viz/follower_views`).
"""

from __future__ import annotations

from typing import Any

from ..timeline import reached
from ..trace import CycleTrace
from . import acceptance, distributions, proposals


def cycle_figures(tr: CycleTrace, phase: str, pos: int | None = None) -> dict[str, Any]:
    """The charts of `tr` as far as `phase` has revealed it (p vs q at draft `pos`, by default
    at the rejection)."""
    figures = {"proposals": proposals.proposals_figure(tr)}
    if not reached(phase, "verify"):
        return figures
    tested = reached(phase, "accept")
    figures["acceptance"] = acceptance.acceptance_figure(tr, tested=tested)
    if options := [d.index for d in tr.drafts]:
        figures["p_vs_q"] = distributions.pq_figure(tr, pos if pos in options else (tr.rejected_at or 1), tested=tested)
    if reached(phase, "resolve"):
        figures["resolve"] = distributions.resolve_figure(tr)
    return figures
