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

Tokens are bytes (specviz.tokenbytes): a character a byte-level BPE cut across tokens, like "🙂"
as F0 9F | 99 82, shows as its bytes, `<0xF0><0x9F>` `<0x99><0x82>`, with a small "=🙂" after the
last piece and "bytes of 🙂 (tokens 5–6)" in each piece's hover text.

A long prompt is folded: its first `head` and last `tail` tokens stay, the middle goes into an
HTML `<details>` element ("⋯ 1,204 more prompt tokens") that opens on a click without any
script (the app inserts the strip with st.html, which runs none). Chips are separated by `<wbr>`
break opportunities, so even thousands of them wrap like text.

This view is HTML rather than plotly: text has to wrap like text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..timeline import reached
from ..tokenbytes import character_spans, label_bytes
from ..trace import CycleTrace
from .markup import esc
from .style import KIND_COLORS, show_token

TokenText = Callable[[int], str]


@dataclass(frozen=True)
class Chip:
    token_id: int
    text: str
    position: int
    kind: str  # prompt / accepted / corrected / bonus / generated / pending / rejected / untested
    tooltip: str
    forced: bool = False  # from a what-if cycle: outcomes forced, not decided by the test
    character: str = ""  # the character(s) this chip's bytes make together with its neighbours'
    character_end: bool = False  # the last chip of that character: the note "=🙂" follows it


FORCED_NOTE = " · WHAT-IF cycle: outcomes forced, not exact"
FORCED_STYLE = ";border-bottom:2px dashed #7c3aed"


def strip_chips(prompt_ids: Sequence[int], traces: Sequence[CycleTrace], token_text: TokenText, cycle: int | None,
                phase: str) -> list[Chip]:
    """Chips for the view at (cycle, phase): everything committed before that cycle, plus the
    cycle's own drafts / emitted tokens as far as `phase` has revealed them."""
    chips = [Chip(t, token_text(t), i, "prompt", f"prompt token {t} · position {i}") for i, t in enumerate(prompt_ids)]
    if cycle is None:
        return mark_characters(chips)
    for tr in traces[:cycle]:
        chips += [_emitted_chip(tr, e.token_id, e.text, e.position, e.kind) for e in tr.emitted]
    tr = traces[cycle]
    if reached(phase, "resolve"):
        chips += [_emitted_chip(tr, e.token_id, e.text, e.position, e.kind) for e in tr.emitted]
        if not reached(phase, "rollback") and tr.tree is None:
            # Still show the drafts the rejection threw away, struck through, until rollback.
            chips += [_draft_chip(d, "rejected" if d.verdict == "rejected" else "untested", revealed=True)
                      for d in tr.drafts if d.verdict != "accepted"]
    elif reached(phase, "draft"):
        revealed = reached(phase, "accept")
        chips += [_draft_chip(d, d.verdict if revealed else "pending", revealed) for d in _in_a_row(tr, revealed)]
    return mark_characters(chips)


def _in_a_row(tr: CycleTrace, revealed: bool) -> Sequence:
    """The drafts that read as a continuation of the text. A token tree's nodes are alternatives,
    several per position (its own panel draws them): the strip shows its first chain -- the
    proposer's favourite, nodes 1, 2, .. -- until the verdicts, then the accepted path."""
    if tr.tree is None:
        return tr.drafts
    if revealed:
        return [tr.drafts[a - 1] for a in tr.tree.path]
    chain, i = [], 1
    while i <= len(tr.drafts) and tr.drafts[i - 1].position == tr.context_len + len(chain):
        chain.append(tr.drafts[i - 1])
        i += 1
    return chain


def mark_characters(chips: Sequence[Chip]) -> list[Chip]:
    """Mark the chips whose bytes make a character together (a byte-level BPE cut it across tokens).

    Bytes join only along the sequence, i.e. between chips at consecutive positions: the rejected
    drafts shown after a corrected token sit at positions already taken, so they join nothing."""
    out = list(chips)
    run_start = 0
    for i in range(1, len(chips) + 1):
        if i < len(chips) and chips[i].position == chips[i - 1].position + 1:
            continue
        run = chips[run_start:i]
        for span in character_spans([label_bytes(c.text) for c in run]):
            first, last = run[span.first].position, run[span.last].position
            note = f" · bytes of {span.text} (tokens {first}–{last})"
            for j in range(run_start + span.first, run_start + span.last + 1):
                c = out[j]
                out[j] = replace(c, tooltip=c.tooltip + note, character=span.text,
                                 character_end=j == run_start + span.last)
        run_start = i
    return out


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


_LEGEND = (("prompt", "prompt"), ("accepted", "accepted draft"), ("corrected", "corrected (residual)"),
           ("bonus", "bonus (p_K+1)"), ("generated", "generated (no proposal)"), ("pending", "pending draft"),
           ("rejected", "rejected"), ("untested", "never tested"))


def strip_html(chips: Sequence[Chip], head: int = 16, tail: int = 48) -> str:
    """Render chips as an HTML fragment (no scripts; the chips' colours inline, the box's look the
    stage's stylesheet, `.svs-strip-text`). A prompt longer
    than head + tail (+ a few: folding three tokens away helps nobody) shows its first `head` and
    last `tail` tokens; the rest wait in a <details> element."""
    # Its look is the stage's stylesheet (static/stage.css `.svs-strip-text`): a size that scales with
    # the screen in lecture mode, where only its newest lines are shown, above the picture.
    parts = ["<div class='svs-strip-text' data-role='strip-text'><div class='svs-strip-lines'>"]
    num_prompt = sum(c.kind == "prompt" for c in chips)
    chip_html = [_chip_html(c) for c in chips]
    if num_prompt > head + tail + FOLD_SLACK:  # the prompt's chips come first (`strip_chips`)
        chip_html[head : num_prompt - tail] = [_details(chip_html[head : num_prompt - tail])]
    parts += [*chip_html, "</div></div>"]
    items = [_swatch(f";border-radius:2px;background:{KIND_COLORS[k]}") + esc(name) for k, name in _LEGEND]
    if any(c.forced for c in chips):
        items.append(_swatch(FORCED_STYLE) + "what-if (forced) cycle")
    if any(c.character for c in chips):
        items.append("<code>&lt;0xF0&gt;</code> a byte: tokens are bytes, and a character may take several (hover one)")
    legend = " ".join(f"<span style='display:inline-block;margin-right:10px'>{item}</span>" for item in items)
    parts.append(f"<div class='svs-strip-legend'>{legend}</div>")
    return "".join(parts)


FOLD_SLACK = 8
# A chip's colours past its fill: white text on the dark fills, dark text on the light ones (orange,
# sky blue) for contrast, a dashed outline while pending, struck through once out of the text.
_KIND_STYLES = {
    "accepted": ";color:#fff;font-weight:600",
    "rejected": ";color:#fff;font-weight:600;text-decoration:line-through",
    "corrected": ";color:#fff;font-weight:600",
    "bonus": ";color:#111827;font-weight:600",
    "pending": ";outline:1.5px dashed #b45309;background:#fde9b8",
    "untested": ";text-decoration:line-through",
    "prompt": ";color:#374151",
}


def _swatch(style: str) -> str:
    return f"<span style='display:inline-block;width:10px;height:10px{style};margin-right:4px'></span>"


def _details(hidden: Sequence[str]) -> str:
    """The folded middle of a long prompt: a summary line that opens on a click, no script needed."""
    summary = ("<summary style='display:inline;cursor:pointer;color:#6b7280;list-style:none;margin:0 6px;"
               f"white-space:nowrap'>⋯ {len(hidden):,} more prompt tokens</summary>")
    return f"<details style='display:inline'>{summary}{'<wbr>'.join(hidden)}</details><wbr>"


def _chip_html(c: Chip) -> str:
    color = KIND_COLORS.get(c.kind, "#e5e7eb")
    text = esc(show_token(c.text, 40))
    if c.kind == "prompt":
        text = text.replace("↵", "↵<br>")
    # pre-wrap, not pre: a chip keeps its own spacing, and the <wbr> after it lets a line break there
    style = f"background:{color};padding:1px 2px;margin:0 1px;border-radius:3px;white-space:pre-wrap"
    style += _KIND_STYLES.get(c.kind, "")
    if c.forced:
        style += FORCED_STYLE
    if c.character:
        style += ";border-bottom:2px dotted #6b7280"  # the pieces of one character, visibly together
    chip = f"<span title='{esc(c.tooltip)}' style='{esc(style)}'>{text}</span>"
    if c.character_end:
        chip += f"<span style='font-size:.75em;color:#6b7280;margin-right:2px'>={esc(c.character)}</span>"
    return chip + "<wbr>"
