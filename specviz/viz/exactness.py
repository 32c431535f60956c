"""Exactness-lab figures: empirical next-token frequencies against the exact p, and TV vs N.

An exact speculative sampler is noisy like the target's own, but unbiased: its TV distance to p
falls like 1/√N, where a biased one (q processed differently from p, HF #32867) levels off.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..lab import LabResult
from .style import DRAFT_COLOR, GRID_COLOR, KIND_COLORS, TARGET_COLOR, base_layout, esc, show_token


def lab_figure(res: LabResult) -> go.Figure:
    titles = (f"Next token after {res.context_len} tokens (N = {res.n} each)", "Total-variation distance to p vs N")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1, subplot_titles=titles)
    names = [esc(show_token(t, 10)) for t in res.token_texts]
    for name, ys, color in (
        ("exact p", list(res.exact), TARGET_COLOR),
        ("speculative (empirical)", res.spec_freq(), KIND_COLORS["accepted"]),
        ("target only (empirical)", res.target_freq(), DRAFT_COLOR),
    ):
        fig.add_trace(go.Bar(x=names, y=ys, name=name, marker_color=color), 1, 1)
    ns = list(res.checkpoints)
    scale = res.tv_target[-1] * math.sqrt(ns[-1]) if ns else 1.0
    for name, ys, mode, line in (
        ("TV speculative", list(res.tv_spec), "lines+markers", dict(color=KIND_COLORS["accepted"])),
        ("TV target only", list(res.tv_target), "lines+markers", dict(color=DRAFT_COLOR)),
        ("∝ 1/√N", [scale / math.sqrt(n) for n in ns], "lines", dict(color="#9ca3af", dash="dot")),
    ):
        fig.add_trace(go.Scatter(x=ns, y=ys, mode=mode, name=name, line=line), 1, 2)
    fig.update_layout(**base_layout(f"Exactness lab · temperature {res.temperature:g}", 380))
    fig.update_layout(barmode="group", legend=dict(y=-0.25, yanchor="top", x=0, xanchor="left"))
    fig.update_xaxes(type="log", title_text="N samples", row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_yaxes(gridcolor=GRID_COLOR)
    return fig
