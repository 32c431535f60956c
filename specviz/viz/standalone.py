"""A whole run as one standalone HTML page, stepped with its own Next/Back buttons.

A lecture prepared at home should play anywhere: a projector's laptop without Python, a
student's phone. This page holds every step of the run — the prefill, then each phase of each
cycle — as the same KV picture the app draws (`kv_html.kv_stage_html`, animated from the step
before) with the phase's narrative and status line. A few lines of inline JavaScript show one
step at a time: Next / Back buttons, the arrow keys, and a step counter. Showing a step re-runs
its CSS animation (an element that becomes displayed restarts its animations); stepping back
shows the earlier step without animation, since its animation runs forward in time.

No server, no network: the styles are inline, there are no external scripts or fonts.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from .. import narrative
from ..runfile import RunRecord
from ..trace import CYCLE_PHASES, PhaseSnapshot
from .kv_html import kv_stage_html
from .style import FONT, esc_attr

_STYLE = re.compile(r"<style>(.*?)</style>", re.S)
_MD = MarkdownIt("commonmark", {"html": False})  # narrative text is ours, but token texts inside it are not

_PAGE_CSS = f"""
body {{ font-family: {FONT}; margin: 0; color: #1f2937; background: #fff; }}
header {{ position: sticky; top: 0; z-index: 5; background: #f8fafc; border-bottom: 1px solid #e5e7eb;
  padding: 10px 20px; display: flex; gap: 14px; align-items: center; font-size: 18px; }}
header button {{ font-size: 18px; padding: 8px 18px; border-radius: 8px; border: 1px solid #94a3b8;
  background: #fff; cursor: pointer; }}
header button.primary {{ background: #0072b2; color: #fff; border-color: #0072b2; }}
header button:focus-visible {{ outline: 3px solid #e69f00; outline-offset: 2px; }}
main {{ padding: 12px 20px 40px; max-width: 1900px; margin: auto; }}
.step {{ display: none; }}
.step.shown {{ display: block; }}
.status {{ font-size: 16px; margin: 4px 0 10px; }}
.story {{ font-size: 17px; line-height: 1.5; border: 1px solid #e5e7eb; border-radius: 8px;
  padding: 4px 16px; margin-top: 12px; }}
.noanim * {{ animation: none !important; transition: none !important; }}
"""

_SCRIPT = """
(function () {
  var steps = document.querySelectorAll('.step');
  var counter = document.getElementById('counter');
  var i = 0;
  function show(j, animate) {
    steps[i].classList.remove('shown');
    i = Math.max(0, Math.min(steps.length - 1, j));
    steps[i].classList.toggle('noanim', !animate);
    steps[i].classList.add('shown');
    counter.textContent = 'step ' + (i + 1) + ' of ' + steps.length + ' \\u00b7 ' + steps[i].dataset.title;
  }
  document.getElementById('next').onclick = function () { show(i + 1, true); };
  document.getElementById('back').onclick = function () { show(i - 1, false); };
  document.addEventListener('keydown', function (e) {
    if (e.key === 'ArrowRight') { show(i + 1, true); }
    if (e.key === 'ArrowLeft') { show(i - 1, false); }
  });
  show(0, false);
})();
"""


def run_steps(record: RunRecord) -> list[tuple[str, PhaseSnapshot, int | None]]:
    """(phase, snapshots, cycle) of every step of the run, in order: prefill, then each phase of
    each cycle after its "start" (which is the previous cycle's rollback)."""
    target, proposer = record.prefill
    steps: list[tuple[str, PhaseSnapshot, int | None]] = [("prefill", PhaseSnapshot("prefill", target, proposer), None)]
    for tr in record.traces:
        steps += [(phase, tr.snapshot(phase), tr.cycle) for phase in CYCLE_PHASES[1:]]
    return steps


def run_html(record: RunRecord) -> str:
    """The run as one standalone page (see the module docstring)."""
    steps = run_steps(record)
    styles: dict[str, None] = {}  # every distinct stylesheet once (they are all scoped to .svkv)
    bodies = []
    for i, (phase, snaps, cycle) in enumerate(steps):
        tr = record.traces[cycle] if cycle is not None else None
        picture = kv_stage_html(
            snaps, steps[i - 1][1] if i else None, record.token_text, trace=tr, phase=phase, proposer=record.proposer
        )
        for css in _STYLE.findall(picture):
            styles.setdefault(css)
        picture = _STYLE.sub("", picture)
        status = narrative.status_markdown(len(record.prompt_ids), record.traces, cycle, phase, record.proposer)
        story = (
            narrative.phase_markdown(tr, phase)
            if tr is not None
            else narrative.prefill_markdown(
                len(record.prompt_ids),
                snaps.target.seq_len,
                snaps.draft.seq_len if snaps.draft is not None else None,
                record.proposer,
            )
        )
        title = "prefill" if cycle is None else f"cycle {cycle + 1} · {phase}"
        bodies.append(
            f"<section class='step' data-title='{esc_attr(title)}'>"
            f"<div class='status'>{_MD.render(status)}</div>{picture}<div class='story'>{_MD.render(story)}</div>"
            "</section>"
        )
    title = esc_attr(record.title or "specviz run")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{title} — specviz</title>"
        f"<style>{_PAGE_CSS}{''.join(styles)}</style></head><body>"
        "<header><button id='back' aria-label='Back one step'>← Back</button>"
        "<button id='next' class='primary' aria-label='Next step'>Next →</button>"
        f"<span id='counter' aria-live='polite'></span><span style='margin-left:auto'>{title} · "
        f"{esc_attr(record.pair)}</span></header>"
        f"<main>{''.join(bodies)}</main><script>{_SCRIPT}</script></body></html>"
    )
