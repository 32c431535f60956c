"""A whole run as one standalone HTML page, stepped by the app's own stage code.

A lecture prepared at home should play anywhere: a projector's laptop without Python, a
student's phone. The page holds every step of the run — the prefill, then each phase of each
cycle — built by the same data builder as the app's stage (`stage_data.steps_payload`: every part of
a step, `stage_data.PARTS`: the KV picture, the status line, the narrative, the generated text),
and it is stepped by the same script
(`stage_js.core_js`: morphdom patching, transitions, FLIP), so the app and the page cannot drift.

The steps are written into the page as plain HTML sections, one after the other. That is the
no-JavaScript fallback: without scripts the page reads top to bottom as the whole run, every
picture and its explanation (the KV picture carries its own text alternative, `role="figure"`
with an aria-label, a visually hidden description and a "Describe this picture" box). With
scripts, the few lines of glue at the end read the sections into the stage's data, hide them,
and show one step at a time: Next / Back buttons, the arrow keys (Shift+→ a whole cycle), a
step counter.

It opens in the **lecture layout** (docs/design.md §3, "One screen in lecture mode"): a prepared run is
most often shown to a room. The pictures are the lecture pictures (the action rows and two of context,
`kv_html.LECTURE_ROWS`), the stage takes the app's lecture classes (the narrative in a column beside the
picture in type that scales with the screen, the generated text above the picture), and the header is
one short line. Without scripts the sections still read as the whole run, the lecture pictures with
their legend and text description put back (standalone.css).

No server, no network: the styles and the script (static/standalone.css and standalone.js, with the
stage's) are inlined, there are no external resources.
"""

from __future__ import annotations

from ..runfile import RunRecord
from . import stage_data, stage_js
from .kv_html import LECTURE_ROWS, stylesheet
from .markup import attrs, esc


def timeline(record: RunRecord) -> stage_data.Timeline:
    return stage_data.Timeline(
        prompt_ids=tuple(record.prompt_ids), prefill=record.prefill, traces=tuple(record.traces),
        texts=record.token_text, proposer=record.proposer, prefill_at_zero=True,
    )  # fmt: skip


def _section(step: dict) -> str:
    """One step as a plain section (the no-JavaScript fallback), each part (`stage_data.PARTS`) in a
    box named by it, one per fragment of a list: the glue reads them back into the stage's data."""
    title = "prefill" if step["cycle"] is None else f"cycle {step['cycle'] + 1} · {step['phase']}"
    boxes = []
    for part in stage_data.PARTS:
        value = step[part.name]
        for html in value if isinstance(value, list) else [value]:
            boxes.append(f"<div{attrs(cls=part.name, data_part=part.name, **dict(part.attrs))}>{html}</div>")
    return f"<section class='step' data-title='{esc(title)}'><h2>{esc(step['title'])}</h2>{''.join(boxes)}</section>"


def run_html(record: RunRecord) -> str:
    """The run as one standalone page (see the module docstring)."""
    tl = timeline(record)
    steps = stage_data.steps_payload(tl, range(tl.last_step + 1), lecture=True, max_rows=LECTURE_ROWS)
    sections = [_section(s) for s in steps.values()]  # the prefill, then each phase of each cycle
    title = esc(record.title or "specviz run")
    script = (stage_js.core_js() + stage_js.read_static("standalone.js")).replace("</script", "<\\/script")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{title} — specviz</title>"
        f"<style>{stage_js.read_static('standalone.css')}{stage_js.stage_css()}</style>{stylesheet()}</head><body>"
        "<header><button id='back' aria-label='Back one step'>← Back</button>"
        "<button id='next' class='primary' aria-label='Next step'>Next →</button>"
        f"<span id='counter' aria-live='polite'></span><span class='run-title'>{title} · "
        f"{esc(record.pair)}</span></header>"
        "<main><div id='stage' data-lecture='1'></div>"
        "<p class='nojs-note'>Scripts are off: every step of the run follows, one after the other.</p>"
        f"<div class='steps'>{''.join(sections)}</div></main>"
        f"<script type='module'>{script}</script></body></html>"
    )
