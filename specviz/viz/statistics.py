"""Statistics figures: how often drafts pass, and what that buys.

* accepted-length histogram: how many drafts each cycle accepted (0 … K);
* acceptance by position: P(d_i accepted | d_i tested). Under the i.i.d. model of Leviathan et
  al. it is flat at α; in practice later positions are often harder;
* theory vs measurement: expected tokens per cycle (1 − α^(K+1))/(1 − α) as a function of K for the
  measured α, with the measured point, and the expected against the measured speedup.

Cycles with no proposal (k = 0, prompt lookup without a match) test nothing: they are left out of
the histogram and counted in the title as plain target steps (see `specviz.stats`).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..stats import AcceptanceStats, SpeedupReport, expected_tokens_per_cycle
from .style import KIND_COLORS, TARGET_COLOR, base_layout


def stats_figure(st: AcceptanceStats, report: SpeedupReport | None = None) -> go.Figure:
    fig = make_subplots(
        rows=1,
        cols=3,
        horizontal_spacing=0.08,
        subplot_titles=(
            "Accepted drafts per cycle",
            "Acceptance by draft position",
            "Tokens per cycle: theory vs measured",
        ),
    )
    fig.add_trace(
        go.Bar(
            x=list(range(len(st.accepted_hist))),
            y=list(st.accepted_hist),
            name="cycles",
            marker_color=KIND_COLORS["accepted"],
            showlegend=False,
            hovertemplate="%{y} cycles accepted %{x} drafts<extra></extra>",
        ),
        1,
        1,
    )
    by_pos = st.acceptance_by_position()
    fig.add_trace(
        go.Bar(
            x=[f"d{i + 1}" for i in range(len(by_pos))],
            y=by_pos,
            showlegend=False,
            marker_color=TARGET_COLOR,
            text=[f"{a}/{t}" for a, t in zip(st.accepted_by_position, st.tested_by_position, strict=True)],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{x}: %{y:.2f} (%{text} tested)<extra></extra>",
        ),
        1,
        2,
    )
    fig.add_hline(
        y=st.alpha,
        line_dash="dot",
        line_color="#6b7280",
        row=1,
        col=2,
        annotation_text=f"α = {st.alpha:.2f}",
        annotation_position="bottom right",
    )
    ks = list(range(1, 17))
    fig.add_trace(
        go.Scatter(
            x=ks,
            y=[expected_tokens_per_cycle(st.alpha, k) for k in ks],
            mode="lines",
            name=f"theory (α = {st.alpha:.2f})",
            line=dict(color="#6b7280", dash="dash"),
        ),
        1,
        3,
    )
    if st.cycles:
        fig.add_trace(
            go.Scatter(
                x=[st.mean_k],
                y=[st.tokens_per_cycle],
                mode="markers",
                name="measured",
                marker=dict(size=12, color=KIND_COLORS["corrected"]),
            ),
            1,
            3,
        )
    title = (
        f"{st.cycles} cycles · α = {st.alpha:.3f} ({st.accepted}/{st.tested} tested drafts accepted) · "
        f"{st.tokens_per_cycle:.2f} tokens/cycle"
    )
    if st.plain_cycles:
        title += f" · {st.plain_cycles} plain step(s) without a proposal"
    if st.forced_cycles:
        title += f" · {st.forced_cycles} forced (what-if) cycle(s) excluded"
    fig.update_layout(**base_layout(title, 330))
    fig.update_xaxes(title_text="accepted", dtick=1, row=1, col=1)
    fig.update_yaxes(range=[0, 1.15], row=1, col=2)
    fig.update_xaxes(title_text="K", row=1, col=3)
    fig.update_layout(legend=dict(x=1, xanchor="right", y=0.02, yanchor="bottom"))
    fig.update_yaxes(gridcolor="#eef0f4")
    return fig


def speedup_figure(report: SpeedupReport) -> go.Figure:
    names = ["theory (Leviathan)", "measured vs autoregressive"]
    vals = [report.theoretical_speedup, report.measured_speedup]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=vals,
            marker_color=["#9ca3af", KIND_COLORS["accepted"]],
            text=[f"{v:.2f}×" if v is not None else "run the baseline" for v in vals],
            textposition="outside",
            cliponaxis=False,
        )
    )
    fig.add_hline(y=1.0, line_dash="dot", line_color="#e45756", annotation_text="no speedup")
    c = f"{report.c:.3f}" if report.c is not None else "?"
    fig.update_layout(**base_layout(f"Speedup · α = {report.alpha:.2f}, K ≈ {report.k:.1f}, c = {c}", 300))
    fig.update_layout(showlegend=False)
    fig.update_yaxes(title="× faster", rangemode="tozero", gridcolor="#eef0f4")
    return fig
