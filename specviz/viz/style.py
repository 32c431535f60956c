"""Shared colours, labels and small helpers for every specviz figure.

One colour-blind-safe palette (Okabe & Ito), so that a colour means the same thing in every view;
why these colours, and the patterns and glyphs that go with them: docs/design.md §3, "The KV
picture".
"""

from __future__ import annotations

import plotly.graph_objects as go

from .markup import label as esc  # plotly's labels: the one escaping path (viz/markup.py)

# Cache slot states (CacheSnapshot.slot_state).
SLOT_COLORS: dict[str, str] = {
    "free": "#ffffff",  # empty: drawn with a dotted border, so it needs no fill
    "committed": "#0072b2",
    "provisional": "#e69f00",
    "stale": "#d9a3c4",  # light reddish purple: far in lightness from committed blue for protanopes
}
SLOT_TEXT_COLORS: dict[str, str] = {
    "free": "#6b7280", "committed": "#ffffff", "provisional": "#1f1300", "stale": "#3d1030",
}

# Token origins / verdicts.
KIND_COLORS: dict[str, str] = {
    "prompt": "#e6e8ec",
    "generated": "#c7d3e6",
    "accepted": "#009e73",
    "corrected": "#a05195",  # reddish purple: the pending drafts' orange is the proposer's, this the target's
    "bonus": "#56b4e9",
    "pending": "#e69f00",
    # darker than Okabe-Ito's #D55E00, which a deuteranope cannot tell from the corrected orange
    "rejected": "#b84a00",
    "untested": "#bab0ac",
}
TARGET_COLOR = "#0072b2"  # p: the target's distribution
DRAFT_COLOR = "#e69f00"  # q: the draft's distribution
RESIDUAL_COLOR = KIND_COLORS["corrected"]
BONUS_COLOR = KIND_COLORS["bonus"]
U_COLOR = "#1f2937"
GRID_COLOR = "#eef0f4"
FONT = "Inter, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"

PHASE_TITLES: dict[str, str] = {
    "prefill": "Prefill", "start": "Start of cycle", "draft": "1 · Draft proposes", "verify": "2 · Target verifies",
    "accept": "3 · Acceptance tests", "resolve": "4 · Corrected / bonus token", "rollback": "5 · Rollback & commit",
}


def fmt_p(x: float, digits: int = 3) -> str:
    """A probability for display: fixed-point, or 2 significant digits when it would round to 0
    (a draft sampled from a flat q has q ~ 1e-4; "0.000" would hide that it was not impossible)."""
    if 0 < x < 10**-digits:
        return f"{x:.1e}"
    return f"{x:.{digits}f}"


def show_token(text: str, limit: int = 12) -> str:
    """Make a token's text visible in a chart label: spaces become '␣', newlines '↵', tabs '⇥'.

    BPE tokens usually carry their leading space; showing it teaches why ' the' and 'the' are
    different tokens.
    """
    shown = text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "") or "∅"
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def base_layout(title: str, height: int, subtitle: str = "") -> dict:
    """Layout defaults shared by all figures: clean white background, compact margins, a short
    title and an optional grey subtitle line (long titles get clipped in half-width columns)."""
    text = title + (f"<br><span style='font-size:12px;color:#6b7280'>{subtitle}</span>" if subtitle else "")
    return dict(
        # The title hangs from the top of the figure; the legend sits just above the plot area, so the
        # two never overlap whatever the figure's height.
        title=dict(
            text=text, x=0.0, xanchor="left", y=1.0, yanchor="top", yref="container", pad=dict(t=10), font=dict(size=15)
        ),
        height=height + (30 if subtitle else 10),
        margin=dict(l=56, r=12, t=92 if subtitle else 66, b=40),
        font=dict(family=FONT, size=12, color="#1f2937"),
        plot_bgcolor="#ffffff",
        paper_bgcolor="#ffffff",
        showlegend=True,
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="right", x=1.0),
    )


def empty_figure(title: str, subtitle: str = "", height: int = 160) -> go.Figure:
    """A figure with a title and no axes: what a view shows when its cycle has nothing to draw
    (no proposal, no rejection, no bonus), so the page keeps its shape and says why."""
    fig = go.Figure()
    fig.update_layout(**base_layout(title, height, subtitle))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def no_proposal_subtitle(note: str) -> str:
    """Why a cycle proposed nothing (the proposer's own words) for an empty figure's subtitle."""
    return esc(note.strip() or "the proposer proposed nothing: the target took one plain step")
