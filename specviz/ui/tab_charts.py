"""The charts tab: the cycle's distributions, phase by phase, nothing revealed early: q of every
draft, from verify on min(1, p/q) and u and p vs q at one position, from resolve on the distribution
the extra token was drawn from. Pure functions of the trace (`viz/cycle_charts`), shared with the
export and the live lecture's follower page.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from ..timeline import reached
from ..trace import CycleTrace
from ..viz.cycle_charts import cycle_figures  # the tab's figures (also the export's and the follower page's)

__all__ = ["PLOT", "charts_tab", "cycle_figures"]

PLOT = dict(theme=None, config={"displaylogo": False})


def charts_tab(tr: CycleTrace | None, phase: str) -> dict[str, Any]:
    """Draw the cycle's charts; returns them (for tests)."""
    if tr is None or phase == "start":
        st.info("The charts describe one cycle: step into a cycle's draft phase to see them.")
        return {}
    options = [d.index for d in tr.drafts]
    left, right = st.columns(2)
    if options and st.session_state.get("dist_pos") not in options:
        st.session_state.dist_pos = tr.rejected_at or 1
    pos = right.segmented_control("Compare p and q at draft position", options, key="dist_pos",
                                  format_func=lambda i: f"d{i}") if options and reached(phase, "verify") else None
    figures = cycle_figures(tr, phase, pos)
    left.plotly_chart(figures["proposals"], key="proposals_fig", **PLOT)
    if "acceptance" not in figures:
        right.info("The target has not scored the drafts yet: acceptance appears after **verify**.")
        return figures
    right.plotly_chart(figures["acceptance"], key="acceptance_fig", **PLOT)
    left, right = st.columns(2)
    if "p_vs_q" in figures:
        left.plotly_chart(figures["p_vs_q"], key="pq_fig", **PLOT)
    else:  # k = 0: a plain target step, there is no q to hold against p
        left.info("**No proposal this cycle**, so there is no p vs q to compare: the target took one plain step "
                  "and its p_1 gave the next token.")
    if "resolve" in figures:
        right.plotly_chart(figures["resolve"], key="resolve_fig", **PLOT)
    elif options:
        right.info("After the tests: the **residual** norm(max(0, p_j − q_j)) at a rejection, or "
                   "**p_{K+1}** for the bonus token when all K pass.")
    else:
        right.info("At **resolve**: the one token generated from p_1.")
    return figures
