"""Distributions behind one cycle (docs/design.md §1): p against q, the residual, and p_{K+1}.

`pq_figure` sets the target's p_i beside the proposer's q_i at one draft position (both processed,
as sampling uses them): where q > p the draft is sometimes rejected, where q < p the residual gives
the mass back. `residual_figure` shows the corrected token drawn from norm(max(0, p_j − q_j)) at
the first rejection; `bonus_figure` the bonus token from p_{K+1} when all K passed (or, with no
proposal, p_1 and the one generated token); `resolve_figure` whichever the cycle needed.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..proposers import registry
from ..trace import CycleTrace, TokenProb
from .style import (
    BONUS_COLOR,
    DRAFT_COLOR,
    GRID_COLOR,
    KIND_COLORS,
    RESIDUAL_COLOR,
    TARGET_COLOR,
    base_layout,
    empty_figure,
    esc,
    fmt_p,
    no_proposal_subtitle,
    show_token,
)


def _one_hot_note(trace: CycleTrace) -> str:
    """Why a q (or p) bar stands at 1: the rule that made it one-hot, not certainty."""
    if trace.temperature == 0:
        return " — greedy (T = 0): p and q are one-hot on their argmax"
    entry = registry.get(trace.proposer)
    return f" — q one-hot ({entry.words.noun})" if entry.one_hot else ""


def pq_figure(trace: CycleTrace, index: int, tested: bool = True) -> go.Figure:
    """p_i vs q_i at 1-based draft position `index` over the union of both top-N lists; the verdict
    only when `tested` (not in the verify phase)."""
    if not 1 <= index <= len(trace.drafts):
        return empty_figure("p vs q: no proposal this cycle", no_proposal_subtitle(trace.proposer_note))
    d = trace.drafts[index - 1]
    p = {tp.token_id: tp for tp in d.target_top}
    q = {tp.token_id: tp for tp in d.draft_top}
    # The drafted token's own p and q are always known, even outside the top-N lists.
    p.setdefault(d.token_id, TokenProb(d.token_id, d.target_prob, d.text))
    q.setdefault(d.token_id, TokenProb(d.token_id, d.draft_prob, d.text))

    def mass(t: int) -> float:
        return max(p[t].prob if t in p else 0.0, q[t].prob if t in q else 0.0)

    ids = sorted(set(p) | set(q), key=lambda t: -mass(t))[:12]
    if d.token_id not in ids:  # a low-probability draft: always show the token that was tested
        ids = sorted(ids[:11] + [d.token_id], key=lambda t: -mass(t))
    names = [_name(p.get(t) or q[t]) for t in ids]
    fig = go.Figure()
    for letter, probs, who, color in (("q", q, "draft", DRAFT_COLOR), ("p", p, "target", TARGET_COLOR)):
        fig.add_trace(go.Bar(x=names, y=[probs[t].prob if t in probs else None for t in ids],
                             name=f"{letter}{index} ({who})", marker_color=color,
                             hovertemplate=letter + "=%{y:.4f}<extra></extra>"))
    fig.add_annotation(x=names[ids.index(d.token_id)], y=max(d.draft_prob, d.target_prob),
                       text=f"d{index} ({d.verdict})" if tested else f"d{index}", showarrow=True, arrowhead=2,
                       ay=-30, font=dict(size=11))
    subtitle = (f"d{index} = {esc(repr(d.text))}: p = {fmt_p(d.target_prob)}, q = {fmt_p(d.draft_prob)}, "
                f"min(1, p/q) = {fmt_p(d.ratio)}" + _one_hot_note(trace))
    fig.update_layout(**base_layout(f"p{index} vs q{index} at position {d.position}", 340, subtitle))
    fig.update_layout(barmode="group", bargap=0.25)
    _probability_axis(fig)
    _note_missing(fig)
    return fig


def residual_figure(trace: CycleTrace) -> go.Figure:
    """The residual at the rejected position with the corrected token highlighted."""
    j = trace.rejected_at
    corrected = trace.corrected_token
    if j is None or corrected is None:
        return empty_figure("No rejection this cycle: no residual was needed.")
    d = trace.drafts[j - 1]
    p = {tp.token_id: tp.prob for tp in d.target_top}
    q = {tp.token_id: tp.prob for tp in d.draft_top}
    items = list(trace.residual_top)
    names = [_name(tp) for tp in items]
    colors = [RESIDUAL_COLOR if tp.token_id == corrected.token_id else "#e3c6de" for tp in items]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=names, y=[tp.prob for tp in items], name=f"residual norm(max(0, p{j} − q{j}))",
                         marker_color=colors, hovertemplate="residual=%{y:.4f}<extra></extra>"))
    for name, probs, marker in (
        (f"p{j}", p, dict(color=TARGET_COLOR, symbol="diamond", size=9)),
        (f"q{j}", q, dict(color=DRAFT_COLOR, symbol="circle", size=9, line=dict(color="#92400e", width=1))),
    ):
        fig.add_trace(go.Scatter(x=names, y=[probs.get(tp.token_id) for tp in items], mode="markers", name=name,
                                 marker=marker))
    greedy = trace.temperature == 0
    how = f"argmax p{j} (greedy)" if greedy else f"sampled from the residual norm(max(0, p{j} − q{j}))"
    if registry.get(trace.proposer).one_hot and not greedy:
        how = f"q{j} is one-hot: the residual is p{j} without d{j}, renormalised"
    chosen = next((tp for tp in items if tp.token_id == corrected.token_id), None)
    if chosen is not None:
        fig.add_annotation(x=_name(chosen), y=chosen.prob, text=f"corrected = {esc(repr(corrected.text))}",
                           showarrow=True, arrowhead=2, ay=-30)
    fig.update_layout(**base_layout(f"Rejection at d{j}: corrected token {esc(repr(corrected.text))}", 340,
                                    f"{how} — no bonus token after a rejection"))
    _probability_axis(fig)
    return fig


def resolve_figure(trace: CycleTrace) -> go.Figure:
    """What the resolve phase sampled from: the residual after a rejection, else p_{K+1} (or p_1)."""
    return residual_figure(trace) if trace.rejected_at is not None else bonus_figure(trace)


def bonus_figure(trace: CycleTrace) -> go.Figure:
    """p_{K+1} with the bonus token highlighted (only when all K drafts were accepted); with no
    drafts at all (k = 0), p_1 with the one generated token of the plain target step."""
    if not trace.drafts:
        return _plain_step_figure(trace)
    bonus = trace.bonus_token
    if bonus is None:
        return empty_figure("A draft was rejected: no bonus token this cycle.")
    k = trace.k
    return _chosen_bars(
        trace.bonus_top, bonus.token_id, f"p{k + 1}", dict(color=(BONUS_COLOR, "#e4cfe0")),
        f"All {k} accepted: bonus token {esc(repr(bonus.text))}",
        f"sampled from p{k + 1} at position {bonus.position} — the verify pass computed p{k + 1} for free",
    )  # fmt: skip


def _plain_step_figure(trace: CycleTrace) -> go.Figure:
    """No proposal: the target's p_1 (recorded in `bonus_top`) and the token generated from it."""
    token = next((e for e in trace.emitted if e.kind == "generated"), None)
    if token is None or not trace.bonus_top:
        return empty_figure("No proposal this cycle: the target took one plain step.")
    how = "argmax p1 (greedy)" if trace.temperature == 0 else "sampled from p1"
    return _chosen_bars(
        trace.bonus_top, token.token_id, "p1",
        dict(color=(KIND_COLORS["generated"], "#e5e7eb"), line=dict(color="#6b7280", width=1)),
        f"No proposal: token {esc(repr(token.text))} generated from p1",
        f"{how} at position {token.position} — a plain target step: no test, no residual, no bonus",
    )  # fmt: skip


def _chosen_bars(items: tuple[TokenProb, ...], chosen: int, name: str, marker: dict, title: str,
                 subtitle: str) -> go.Figure:
    """A distribution's top tokens as bars, the token that was drawn from it highlighted.
    `marker["color"]` is (highlight, others); the rest of `marker` styles every bar."""
    highlight, others = marker["color"]
    colors = [highlight if tp.token_id == chosen else others for tp in items]
    fig = go.Figure(go.Bar(x=[_name(tp) for tp in items], y=[tp.prob for tp in items], name=name,
                           marker={**marker, "color": colors}, hovertemplate="p=%{y:.4f}<extra></extra>"))
    fig.update_layout(**base_layout(title, 340, subtitle))
    _probability_axis(fig)
    return fig


def _name(tp: TokenProb) -> str:
    return f"{esc(show_token(tp.text, 10))} <span style='font-size:9px'>#{tp.token_id}</span>"


def _note_missing(fig: go.Figure) -> None:
    fig.add_annotation(text="missing bar = outside that distribution's stored top-N", x=1, y=-0.28, xref="paper",
                       yref="paper", xanchor="right", showarrow=False, font=dict(size=10, color="#6b7280"))
    fig.update_layout(margin=dict(b=60))


def _probability_axis(fig: go.Figure) -> None:
    fig.update_yaxes(title="probability", gridcolor=GRID_COLOR, rangemode="tozero")
