"""The acceptance tests, left to right: bar min(1, p_i(d_i)/q_i(d_i)) with the uniform draw u_i.

The marker inside its bar means accepted (docs/design.md §1). Positions after the first rejection
are hatched and never tested; at T = 0 there is no draw, the bar is 1 or 0. Before the tests (the
verify phase) the bars stand alone. With prompt lookup q is one-hot, so the bar is p_i(d_i).
Forced (what-if) outcomes are marked: forcing breaks exactness.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..proposers import registry
from ..trace import CycleTrace, DraftStep
from .style import GRID_COLOR, KIND_COLORS, U_COLOR, base_layout, empty_figure, esc, no_proposal_subtitle, show_token


def acceptance_figure(trace: CycleTrace, tested: bool = True) -> go.Figure:
    if not trace.drafts:
        return empty_figure("Acceptance: nothing to test", no_proposal_subtitle(trace.proposer_note))
    greedy = trace.temperature == 0
    xs = [f"d{d.index} {esc(show_token(d.text, 10))}" for d in trace.drafts]
    verdicts = [d.verdict if tested else "pending" for d in trace.drafts]
    marker = dict(color=[KIND_COLORS[v] for v in verdicts], line=dict(color="#6b7280", width=1),
                  pattern=dict(shape=["/" if v == "untested" else "" for v in verdicts], fgcolor="#ffffff", size=6))
    fig = go.Figure(go.Bar(x=xs, y=[d.ratio for d in trace.drafts], name="min(1, p/q)", marker=marker,
                           text=[_bar_label(d, v) for d, v in zip(trace.drafts, verdicts, strict=True)],
                           textposition="outside", cliponaxis=False,
                           customdata=[_hover(d, tested) for d in trace.drafts],
                           hovertemplate="%{customdata}<extra></extra>"))
    if tested and not greedy:
        fig.add_trace(_draws(xs, trace))
    title, subtitle = _titles(trace, tested)
    fig.update_layout(**base_layout(title, 340, subtitle))
    fig.update_yaxes(range=[0, 1.18], title="probability", gridcolor=GRID_COLOR, tickvals=[0, 0.25, 0.5, 0.75, 1])
    fig.update_layout(showlegend=tested and not greedy, bargap=0.35)
    return fig


def _bar_label(d: DraftStep, verdict: str) -> str:
    if verdict == "untested":
        return "never tested"
    if verdict == "pending":
        return f"{d.ratio:.2f}"
    return f"{verdict}{' (forced)' if d.forced else ''}"


def _hover(d: DraftStep, tested: bool) -> str:
    return (
        f"d{d.index} = {esc(repr(d.text))} (token {d.token_id}, position {d.position})<br>"
        f"q={d.draft_prob:.4f} p={d.target_prob:.4f} min(1,p/q)={d.ratio:.4f}"
        + (f"<br>u={d.u:.4f}" if d.u is not None and tested else "")
        # alpha_i: the chance that a draft drawn from q_i passes, whichever token was drawn
        + (f"<br>α_i = Σ min(p, q) = {d.overlap:.4f}" if d.overlap is not None else "")
    )


def _draws(xs: list[str], trace: CycleTrace) -> go.Scatter:
    """The uniform draws u_i as markers over their bars (a forced outcome's marked with an ×)."""
    us = [(x, d) for x, d in zip(xs, trace.drafts, strict=True) if d.u is not None]
    marker = dict(symbol=["x-thin" if d.forced else "line-ew" for _, d in us], size=34,
                  line=dict(width=4, color=U_COLOR), color=U_COLOR)
    return go.Scatter(x=[x for x, _ in us], y=[d.u for _, d in us], mode="markers+text", name="u ~ U(0,1)",
                      marker=marker, text=[f"u={d.u:.2f}" for _, d in us], textposition="middle right",
                      textfont=dict(size=11, color=U_COLOR), hovertemplate="u = %{y:.4f}<extra></extra>")


def _titles(trace: CycleTrace, tested: bool) -> tuple[str, str]:
    lookup = registry.get(trace.proposer).one_hot
    if trace.temperature == 0:
        title = "Acceptance (greedy, T = 0)"
        subtitle = "accept d_i iff d_i = argmax p_i; the first mismatch ends the streak"
    elif tested:
        title = "Acceptance tests, left to right"
        subtitle = ("q is one-hot (prompt lookup): accept d_i iff u_i ≤ p_i(d_i)" if lookup
                    else "accept d_i iff u_i ≤ min(1, p_i(d_i) / q_i(d_i))") + "; the first rejection ends the streak"
    else:
        title = "min(1, p/q) per draft"
        subtitle = ("q is one-hot (prompt lookup), so the bar is p_i(d_i)" if lookup
                    else "known as soon as the verify pass returns p") + "; the tests run next"
    if trace.forced:
        title += " — <span style='color:#b91c1c'>WHAT-IF: forced, not exact</span>"
    return title, subtitle
