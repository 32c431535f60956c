"""The token strip: the committed text, each token coloured by where it came from.

Origins: the prompt; an *accepted* draft token; the *corrected* token sampled from the residual at
the first rejection; the *bonus* token sampled from p_{K+1} when every draft passed. While a
cycle is in flight its drafts are shown as pending chips (amber, dashed) after the committed
text; once the acceptance tests ran they turn green (accepted), red (rejected) or grey (never
tested, because an earlier draft was rejected). Hovering a chip shows its id, position and
probabilities. A cycle with no proposal (k = 0) shows no pending chips: its one token is
*generated* from p_1 by a plain target step.

Tokens of a forced (what-if) cycle carry a dashed purple underline, a "what-if" line in their
hover text and a legend entry: their values were not decided by the acceptance test.

This view is HTML rather than plotly: text has to wrap like text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..trace import CYCLE_PHASES, CycleTrace
from .style import KIND_COLORS, esc_attr, show_token

TokenText = Callable[[int], str]


@dataclass(frozen=True)
class Chip:
    token_id: int
    text: str
    position: int
    kind: str  # prompt / accepted / corrected / bonus / generated / pending / rejected / untested
    tooltip: str
    forced: bool = False  # from a what-if cycle: outcomes forced, not decided by the test


FORCED_NOTE = " · WHAT-IF cycle: outcomes forced, not exact"
FORCED_STYLE = ";border-bottom:2px dashed #7c3aed"


def strip_chips(
    prompt_ids: Sequence[int],
    traces: Sequence[CycleTrace],
    token_text: TokenText,
    cycle: int | None,
    phase: str,
) -> list[Chip]:
    """Chips for the view at (cycle, phase): everything committed before that cycle, plus the
    cycle's own drafts / emitted tokens as far as `phase` has revealed them."""
    chips = [Chip(t, token_text(t), i, "prompt", f"prompt token {t} · position {i}") for i, t in enumerate(prompt_ids)]
    if cycle is None:
        return chips
    for tr in traces[:cycle]:
        chips += [_emitted_chip(tr, e.token_id, e.text, e.position, e.kind) for e in tr.emitted]
    tr = traces[cycle]
    step = CYCLE_PHASES.index(phase)
    if step >= CYCLE_PHASES.index("resolve"):
        chips += [_emitted_chip(tr, e.token_id, e.text, e.position, e.kind) for e in tr.emitted]
        if step < CYCLE_PHASES.index("rollback"):
            # Still show the drafts the rejection threw away, struck through, until rollback.
            chips += [
                _draft_chip(d, "rejected" if d.verdict == "rejected" else "untested", revealed=True)
                for d in tr.drafts
                if d.verdict != "accepted"
            ]
    elif step >= CYCLE_PHASES.index("draft"):
        revealed = step >= CYCLE_PHASES.index("accept")
        chips += [_draft_chip(d, d.verdict if revealed else "pending", revealed) for d in tr.drafts]
    return chips


def _emitted_chip(tr: CycleTrace, token_id: int, text: str, position: int, kind: str) -> Chip:
    tip = f"{kind} token {token_id} · position {position} · cycle {tr.cycle + 1}"
    if kind == "generated":
        tip += " · no proposal: a plain target step"
    for d in tr.drafts:
        if d.position == position and d.token_id == token_id and kind == "accepted":
            tip += f" · q={d.draft_prob:.3f} p={d.target_prob:.3f}"
    return Chip(token_id, text, position, kind, tip + (FORCED_NOTE if tr.forced else ""), tr.forced)


def _draft_chip(d, kind: str, revealed: bool) -> Chip:  # d: DraftStep
    tip = f"draft d{d.index} · token {d.token_id} · position {d.position} · q={d.draft_prob:.3f}"
    forced = revealed and d.forced  # only once the verdicts are shown: before, it would give them away
    if revealed:
        tip += f" · p={d.target_prob:.3f} · min(1,p/q)={d.ratio:.3f}"
        if d.u is not None:
            tip += f" · u={d.u:.3f}"
        tip += f" · {d.verdict}" + (" (forced)" if d.forced else "")
    return Chip(d.token_id, d.text, d.position, kind, tip + (FORCED_NOTE if forced else ""), forced)


_LEGEND = (
    ("prompt", "prompt"),
    ("accepted", "accepted draft"),
    ("corrected", "corrected (residual)"),
    ("bonus", "bonus (p_K+1)"),
    ("generated", "generated (no proposal)"),
    ("pending", "pending draft"),
    ("rejected", "rejected"),
    ("untested", "never tested"),
)


def strip_html(chips: Sequence[Chip], max_prompt_chips: int = 400) -> str:
    """Render chips as a self-contained HTML fragment (inline styles; no scripts)."""
    parts = [
        "<div style='font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px;"
        "line-height:2.0;padding:8px 10px;border:1px solid #e5e7eb;border-radius:8px;background:#fafafa'>"
    ]
    prompt_chips = [c for c in chips if c.kind == "prompt"]
    skipped = max(0, len(prompt_chips) - max_prompt_chips)
    if skipped:
        parts.append(f"<span style='color:#9ca3af'>… {skipped} earlier prompt tokens … </span>")
    seen_prompt = 0
    for c in chips:
        if c.kind == "prompt":
            seen_prompt += 1
            if seen_prompt <= skipped:
                continue
        parts.append(_chip_html(c))
    parts.append("</div>")
    legend = " ".join(
        f"<span style='display:inline-block;margin-right:10px'><span style='display:inline-block;width:10px;"
        f"height:10px;border-radius:2px;background:{KIND_COLORS[k]};margin-right:4px'></span>{esc_attr(name)}</span>"
        for k, name in _LEGEND
    )
    if any(c.forced for c in chips):
        legend += (
            f" <span style='display:inline-block;margin-right:10px'><span style='display:inline-block;width:10px;"
            f"height:10px{FORCED_STYLE};margin-right:4px'></span>what-if (forced) cycle</span>"
        )
    parts.append(f"<div style='font-size:12px;color:#4b5563;margin-top:4px'>{legend}</div>")
    return "".join(parts)


def _chip_html(c: Chip) -> str:
    color = KIND_COLORS.get(c.kind, "#e5e7eb")
    text = (
        esc_attr(show_token(c.text, 40)).replace("↵", "↵<br>")
        if c.kind == "prompt"
        else esc_attr(show_token(c.text, 40))
    )
    style = f"background:{color};padding:1px 2px;margin:0 1px;border-radius:3px;white-space:pre"
    if c.kind in ("accepted", "corrected", "bonus", "rejected"):
        style += ";color:#fff;font-weight:600"
    if c.kind == "pending":
        style += ";outline:1.5px dashed #b45309;background:#fde9b8"
    if c.kind in ("rejected", "untested"):
        style += ";text-decoration:line-through"
    if c.kind == "prompt":
        style += ";color:#374151"
    if c.forced:
        style += FORCED_STYLE
    return f"<span title='{esc_attr(c.tooltip)}' style='{style}'>{text}</span>"
