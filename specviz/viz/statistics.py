"""Statistics figures: how often drafts pass, and what that buys (docs/design.md §1, "Expected gain").

The machine's cost law (`specviz.costlaw`): its verify curve v(N), the break-even acceptance per
K against the acceptance seen, and the expected speedup per K with the choices auto made. The
accepted-length histogram, acceptance by draft position, the expected tokens per cycle against
the measured point, the speedup one measured factor at a time (`stats.SpeedupReport`), and each
cycle's time split into the proposer's passes, the verify pass and the bookkeeping. Cycles with no
proposal test nothing: they stay out of the histogram and are counted as plain target steps.
Forced (what-if) cycles are hatched and left out of every statistic. Counting axes start at zero;
cycles are numbered from 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import costlaw
from ..stats import AcceptanceStats, CycleCost, SpeedupReport, expected_tokens_per_cycle
from ..trace import CycleTrace
from .style import DRAFT_COLOR, GRID_COLOR, KIND_COLORS, TARGET_COLOR, base_layout

STATS_PANELS = ("Accepted drafts per cycle", "Acceptance by draft position", "Tokens per cycle: theory vs measured")


def stats_figure(st: AcceptanceStats, report: SpeedupReport | None = None) -> go.Figure:
    """The three acceptance panels side by side (`report` is accepted for the callers' symmetry)."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08, subplot_titles=STATS_PANELS)
    fig.add_trace(go.Bar(x=list(range(len(st.accepted_hist))), y=list(st.accepted_hist), name="cycles",
                         marker_color=KIND_COLORS["accepted"], showlegend=False,
                         hovertemplate="%{y} cycles accepted %{x} drafts<extra></extra>"), 1, 1)
    by_pos = st.acceptance_by_position()
    fig.add_trace(go.Bar(x=[f"d{i + 1}" for i in range(len(by_pos))], y=by_pos, showlegend=False,
                         marker_color=TARGET_COLOR, textposition="outside", cliponaxis=False,
                         text=[f"{a}/{t}" for a, t in zip(st.accepted_by_position, st.tested_by_position, strict=True)],
                         hovertemplate="%{x}: %{y:.2f} (%{text} tested)<extra></extra>"), 1, 2)
    fig.add_hline(y=st.alpha, line_dash="dot", line_color="#6b7280", row=1, col=2,
                  annotation_text=f"α = {st.alpha:.2f}", annotation_position="bottom right")  # fmt: skip
    ks = list(range(1, 17))
    fig.add_trace(go.Scatter(x=ks, y=[expected_tokens_per_cycle(st.alpha, k) for k in ks], mode="lines",
                             name=f"theory (α = {st.alpha:.2f})", line=dict(color="#6b7280", dash="dash")), 1, 3)
    if st.cycles:
        fig.add_trace(go.Scatter(x=[st.mean_k], y=[st.tokens_per_cycle], mode="markers", name="measured",
                                 marker=dict(size=12, color=KIND_COLORS["corrected"])), 1, 3)
    fig.update_layout(**base_layout(_stats_title(st), 330))
    fig.update_xaxes(title_text="accepted", dtick=1, rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="cycles", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(range=[0, 1.15], row=1, col=2)
    fig.update_xaxes(title_text="K", rangemode="tozero", row=1, col=3)
    fig.update_yaxes(title_text="tokens per cycle", rangemode="tozero", row=1, col=3)
    fig.update_layout(legend=dict(x=1, xanchor="right", y=0.02, yanchor="bottom"))
    fig.update_yaxes(gridcolor=GRID_COLOR)
    return fig


def _stats_title(st: AcceptanceStats) -> str:
    title = (f"{st.cycles} cycles · α = {st.alpha:.3f} ({st.accepted}/{st.tested} tested drafts accepted) · "
             f"{st.tokens_per_cycle:.2f} tokens/cycle")
    if st.plain_cycles:
        title += f" · {st.plain_cycles} plain step(s) without a proposal"
    if st.forced_cycles:
        title += f" · {st.forced_cycles} forced (what-if) cycle(s) excluded"
    return title


SPEEDUP_BARS = (
    ("textbook theory", "theoretical_speedup", "#9ca3af"),
    ("theory with measured v(K)", "theory_with_pass_costs", "#6b7280"),
    ("+ bookkeeping", "theory_with_bookkeeping", "#4b5563"),
    ("measured vs autoregressive", "measured_speedup", KIND_COLORS["accepted"]),
)


def speedup_figure(report: SpeedupReport) -> go.Figure:
    """The textbook prediction, re-evaluated with each measured cost in turn, then the measurement."""
    names = [name for name, _, _ in SPEEDUP_BARS]
    vals = [getattr(report, attr) for _, attr, _ in SPEEDUP_BARS]
    fig = go.Figure(go.Bar(x=names, y=vals, marker_color=[color for _, _, color in SPEEDUP_BARS],
                           text=[f"{v:.2f}×" if v is not None else "run the baseline" for v in vals],
                           textposition="outside", cliponaxis=False))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#e45756", annotation_text="no speedup")
    c = f"{report.c:.3f}" if report.c is not None else "?"
    v = f"{report.verify_cost:.2f}" if report.verify_cost is not None else "? (baseline)"
    title = f"Speedup · α = {report.alpha:.2f}, K ≈ {report.k:.1f}, c = {c}, v(K) = {v}"
    fig.update_layout(**base_layout(title, 300, "v(K): one verify pass over K+1 tokens, in plain decoding steps"))
    fig.update_layout(showlegend=False)
    fig.update_yaxes(title="× faster", rangemode="tozero", gridcolor=GRID_COLOR)
    return fig


# (label, CycleCost attribute, colour): the stacked pieces of one cycle's time.
TIME_PARTS = (
    ("proposer passes (draft)", "draft_ms", DRAFT_COLOR),
    ("target verify pass", "verify_ms", TARGET_COLOR),
    ("bookkeeping (accept, resolve, rollback)", "bookkeeping_ms", "#9ca3af"),
    ("invariant check", "check_ms", "#d1d5db"),
)


def cycle_time_figure(costs: list[CycleCost], plain_ms_per_token: float | None = None) -> go.Figure:
    """One stacked bar per cycle: where its wall time went. With a baseline, a marker shows what plain
    decoding would have spent on the tokens the cycle committed (a bar below it beat plain decoding)."""
    labels = [f"{c.number}" + (" what-if" if c.forced else "") for c in costs]
    fig = go.Figure()
    for name, attr, color in TIME_PARTS:
        ys = [getattr(c, attr) for c in costs]
        if attr == "check_ms" and not any(ys):
            continue  # the check was off: no empty legend entry
        fig.add_trace(go.Bar(x=labels, y=ys, name=name,
                             marker=dict(color=color, pattern=dict(shape=["/" if c.forced else "" for c in costs])),
                             hovertemplate=f"cycle %{{x}} · {name}: %{{y:.1f}} ms<extra></extra>"))
    if plain_ms_per_token:
        fig.add_trace(go.Scatter(x=labels, y=[c.tokens * plain_ms_per_token for c in costs], mode="markers",
                                 name="plain decoding, same tokens",
                                 marker=dict(symbol="line-ew-open", size=26, line=dict(width=3, color="#111827")),
                                 hovertemplate="cycle %{x}: plain decoding would take %{y:.1f} ms<extra></extra>"))
    forced = sum(c.forced for c in costs)
    subtitle = "one verify pass vs the proposer's passes; a bar under its marker beat plain decoding"
    if forced:
        subtitle += f" · {forced} hatched what-if cycle(s): not in the statistics"
    fig.update_layout(**base_layout("Time per cycle", 280, subtitle), barmode="stack")
    fig.update_xaxes(title_text="cycle", type="category")
    fig.update_yaxes(title_text="ms", rangemode="tozero", gridcolor=GRID_COLOR)
    return fig


LAW_PANELS = ("Verify cost v(N), in plain steps", "Break-even acceptance per K", "Expected speedup per K")


def law_figure(law: costlaw.CostLaw, proposer: str, traces: Sequence[CycleTrace]) -> go.Figure:
    """This machine's cost law (or the recording machine's) beside what this run saw: v(N) as
    measured, the flat acceptance at which K drafts just pay against the run's a_1, and
    E(K)/T(K) under the run's acceptance per depth, with how often auto chose each K."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08, subplot_titles=LAW_PANELS)
    fig.add_trace(go.Scatter(x=list(law.ns), y=list(law.verify), mode="lines+markers", name="v(N) measured",
                             line=dict(color=TARGET_COLOR),
                             hovertemplate="N = %{x}: %{y:.2f} plain steps<extra></extra>"), 1, 1)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#6b7280", row=1, col=1,
                  annotation_text="textbook: 1", annotation_position="top left")  # fmt: skip
    ks = list(range(1, costlaw.AUTO_MAX_K + 1))
    acceptance = costlaw.run_acceptance(traces, proposer)
    fig.add_trace(go.Bar(x=ks, y=[costlaw.break_even(law, proposer, k) for k in ks], name="break-even acceptance",
                         marker_color="#9ca3af", hovertemplate="K = %{x}: pays above %{y:.2f}<extra></extra>"), 1, 2)
    fig.add_hline(y=acceptance[0], line_dash="dash", line_color=KIND_COLORS["accepted"], row=1, col=2,
                  annotation_text=f"a1 seen = {acceptance[0]:.2f}", annotation_position="top right")  # fmt: skip
    speedups = [1.0] + [costlaw.expected_tokens(acceptance, k) / costlaw.cycle_cost(law, proposer, k) for k in ks]
    chosen = Counter(t.auto.k for t in traces if t.auto is not None)
    fig.add_trace(go.Scatter(x=[0, *ks], y=speedups, mode="lines+markers", name="E(K)/T(K) with the acceptance seen",
                             line=dict(color=DRAFT_COLOR),
                             hovertemplate="K = %{x}: %{y:.2f}× a plain step<extra></extra>"), 1, 3)
    if chosen:
        picked = sorted(k for k in chosen if k <= costlaw.AUTO_MAX_K)
        fig.add_trace(go.Scatter(x=picked, y=[speedups[k] for k in picked], mode="markers+text", name="auto chose",
                                 text=[f"{chosen[k]}×" for k in picked], textposition="top center",
                                 marker=dict(size=14, color=KIND_COLORS["corrected"], symbol="star"),
                                 hovertemplate="auto chose K = %{x} in %{text} cycles<extra></extra>"), 1, 3)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#e45756", row=1, col=3)
    title = f"The cost law · {law.machine or 'this machine'} · one plain step {law.step_ms:.1f} ms"
    subtitle = f"draft cost c = {law.cost_of(proposer):.3f} plain steps per draft ({proposer})"
    fig.update_layout(**base_layout(title, 320, subtitle))
    fig.update_xaxes(title_text="N (tokens in one verify pass)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="K", dtick=1, row=1, col=2)
    fig.update_yaxes(range=[0, 1.05], row=1, col=2)
    fig.update_xaxes(title_text="K (0 = plain step)", dtick=1, row=1, col=3)
    fig.update_yaxes(rangemode="tozero", row=1, col=3)
    fig.update_layout(legend=dict(x=1, xanchor="right", y=0.02, yanchor="bottom"))
    fig.update_yaxes(gridcolor=GRID_COLOR)
    return fig
