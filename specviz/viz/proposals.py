"""Draft proposals: what the proposer sampled at each of the K positions, and what else it considered.

Column i holds the top tokens of the processed q_i with the sampled d_i outlined: a *sample*, often
not the top cell at T > 0. For prompt lookup q is one-hot on the copy (docs/design.md §1b). At
T = 0 every q_i is one-hot on the argmax; the titles say that this is the rule, not confidence.
"""

from __future__ import annotations

import plotly.graph_objects as go

from ..proposers import registry
from ..trace import CycleTrace
from .style import DRAFT_COLOR, base_layout, empty_figure, esc, fmt_p, no_proposal_subtitle, show_token

GREEDY_SUBTITLE = ("greedy decoding (T = 0) makes each q_i one-hot: q = 1 on the proposer's argmax d_i and 0 "
                   "elsewhere (K = {k}) — q = 1 here is the rule, not confidence")


def proposals_figure(trace: CycleTrace, top_n: int = 6) -> go.Figure:
    k = len(trace.drafts)
    if k == 0:
        return empty_figure("Draft proposals: none this cycle", no_proposal_subtitle(trace.proposer_note))
    # Rows actually filled: top_n, or fewer when every q lists fewer tokens (one-hot lookup: one).
    depth = max(1, max(len(d.draft_top[:top_n]) for d in trace.drafts))
    # A draft sampled from outside q's top-N (a flat q) gets an extra bottom row of its own.
    outside = any(all(tp.token_id != d.token_id for tp in d.draft_top[:top_n]) for d in trace.drafts)
    n_rows = depth + (1 if outside else 0)
    z: list[list[float | None]] = [[None] * k for _ in range(n_rows)]
    text = [[""] * k for _ in range(n_rows)]
    hover = [[""] * k for _ in range(n_rows)]
    pick_x, pick_y, pick_text = [], [], []
    for col, d in enumerate(trace.drafts):
        rows = list(d.draft_top[:top_n])
        for row, tp in enumerate(rows):
            z[row][col] = tp.prob
            text[row][col] = f"{esc(show_token(tp.text, 9))}<br>{tp.prob:.2f}"
            hover[row][col] = (f"d{d.index} alternative #{row + 1}: token {tp.token_id} {esc(repr(tp.text))} "
                               f"q={tp.prob:.4f}")
        rank = next((r for r, tp in enumerate(rows) if tp.token_id == d.token_id), None)
        if rank is None:
            rank = depth
            z[rank][col] = d.draft_prob
            text[rank][col] = f"{esc(show_token(d.text, 9))}<br>{fmt_p(d.draft_prob)}"
            hover[rank][col] = f"d{d.index} = {esc(repr(d.text))}: outside q's top {top_n}"
        pick_x.append(col)
        pick_y.append(rank)
        pick_text.append(f"d{d.index} = {esc(repr(d.text))} sampled with q={d.draft_prob:.4f}")
    fig = go.Figure(go.Heatmap(z=z, text=text, texttemplate="%{text}", textfont=dict(size=11), customdata=hover,
                               hovertemplate="%{customdata}<extra></extra>", zmin=0, zmax=1, showscale=False,
                               colorscale=[[0, "#fff7e6"], [1, DRAFT_COLOR]], xgap=3, ygap=3))
    fig.add_trace(go.Scatter(x=pick_x, y=pick_y, mode="markers", name="sampled d_i",
                             marker=dict(symbol="square-open", size=44, color="#b45309", line=dict(width=3)),
                             text=pick_text, hovertemplate="%{text}<extra></extra>"))
    entry = registry.get(trace.proposer)  # its words; a deterministic proposer's q is one-hot at any T
    greedy = trace.temperature == 0 and not entry.one_hot
    title = "Draft proposals: d_i = argmax q_i (greedy, one-hot q)" if greedy else "Draft proposals: d_i ~ q_i"
    subtitle = GREEDY_SUBTITLE if greedy else entry.words.proposals
    fig.update_layout(**base_layout(title, 110 + 44 * n_rows, subtitle.format(n=top_n, k=k)))
    fig.update_xaxes(tickmode="array", tickvals=list(range(k)), side="top", showgrid=False,
                     ticktext=[f"d{d.index} · pos {d.position}" for d in trace.drafts])
    fig.update_yaxes(tickmode="array", tickvals=list(range(n_rows)), autorange="reversed", showgrid=False,
                     ticktext=[f"#{r + 1}" for r in range(depth)] + (["other"] if outside else []))
    fig.update_layout(margin=dict(l=48, r=10, t=112, b=10), showlegend=False)
    return fig
