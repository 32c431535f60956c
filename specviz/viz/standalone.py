"""A whole run as one standalone HTML page, stepped by the app's own stage code.

A lecture prepared at home should play anywhere: a projector's laptop without Python, a
student's phone. The page holds every step of the run — the prefill, then each phase of each
cycle — built by the same data builder as the app's stage (`stage_data.steps_payload`: the KV
picture, the status line, the narrative), and it is stepped by the same script
(`stage_js.core_js`: morphdom patching, transitions, FLIP), so the app and the page cannot drift.

The steps are written into the page as plain HTML sections, one after the other. That is the
no-JavaScript fallback: without scripts the page reads top to bottom as the whole run, every
picture and its explanation (the KV picture carries its own text alternative, `role="figure"`
with an aria-label, a visually hidden description and a "Describe this picture" box). With
scripts, the few lines of glue at the end read the sections into the stage's data, hide them,
and show one step at a time: Next / Back buttons, the arrow keys (Shift+→ a whole cycle), a
step counter.

No server, no network: the styles and the script are inline, there are no external resources.
"""

from __future__ import annotations

from ..runfile import RunRecord
from ..trace import CYCLE_PHASES, PhaseSnapshot
from . import stage_data, stage_js
from .kv_html import stylesheet
from .style import FONT, esc_attr

_PAGE_CSS = f"""
body {{ font-family: {FONT}; margin: 0; color: #1f2937; background: #fff; }}
header {{ position: sticky; top: 0; z-index: 5; background: #f8fafc; border-bottom: 1px solid #e5e7eb;
  padding: 10px 20px; display: flex; gap: 14px; align-items: center; font-size: 18px; }}
header button {{ font-size: 18px; padding: 8px 18px; border-radius: 8px; border: 1px solid #94a3b8;
  background: #fff; cursor: pointer; }}
header button.primary {{ background: #0072b2; color: #fff; border-color: #0072b2; }}
header button:focus-visible {{ outline: 3px solid #e69f00; outline-offset: 2px; }}
main {{ padding: 12px 20px 40px; max-width: 1900px; margin: auto; }}
.step {{ border-bottom: 2px solid #e5e7eb; padding-bottom: 18px; margin-bottom: 18px; }}
.step .status {{ font-size: 16px; margin: 4px 0 10px; }}
.step .story {{ font-size: 17px; line-height: 1.5; border: 1px solid #e5e7eb; border-radius: 8px;
  padding: 4px 16px; margin-top: 12px; }}
.js .steps {{ display: none; }}
.nojs-note {{ font-size: 16px; color: #4b5563; }}
.js .nojs-note {{ display: none; }}
"""

# The page's glue: read the sections into the stage's data, then step locally. No server to ask.
_GLUE = """
document.documentElement.classList.add('js');
const svSteps = {};
document.querySelectorAll('section.step').forEach((sec, i) => {
  svSteps[String(i)] = {
    title: sec.dataset.title, kv: [sec.querySelector('.kv').innerHTML],
    status: sec.querySelector('.status').innerHTML, story: sec.querySelector('.story').innerHTML, strip: '',
  };
});
const svCounter = document.getElementById('counter');
const svTotal = Object.keys(svSteps).length;
const svStage = createStage(document.getElementById('stage'), {
  shown: (step, d) => { svCounter.textContent = `step ${step + 1} of ${svTotal} · ${d.title}`; },
});
svStage.update({run: 0, seq: 0, view: 0, steps: svSteps, more: false, follow: false, quiz: [],
  end: 'This is the last step of the run.'});
document.getElementById('next').onclick = () => svStage.next();
document.getElementById('back').onclick = () => svStage.back();
window.addEventListener('keydown', stageKeys(svStage), true);
window.__specvizStage = svStage;
"""


def run_steps(record: RunRecord) -> list[tuple[str, PhaseSnapshot, int | None]]:
    """(phase, snapshots, cycle) of every step of the run, in order: prefill, then each phase of
    each cycle after its "start" (which is the previous cycle's rollback)."""
    target, proposer = record.prefill
    steps: list[tuple[str, PhaseSnapshot, int | None]] = [("prefill", PhaseSnapshot("prefill", target, proposer), None)]
    for tr in record.traces:
        steps += [(phase, tr.snapshot(phase), tr.cycle) for phase in CYCLE_PHASES[1:]]
    return steps


def timeline(record: RunRecord) -> stage_data.Timeline:
    return stage_data.Timeline(
        prompt_ids=tuple(record.prompt_ids), prefill=record.prefill, traces=tuple(record.traces),
        texts=record.token_text, proposer=record.proposer, prefill_at_zero=True,
    )  # fmt: skip


def run_html(record: RunRecord) -> str:
    """The run as one standalone page (see the module docstring)."""
    tl = timeline(record)
    steps = stage_data.steps_payload(tl, range(tl.last_step + 1), lecture=False, max_rows=None)
    sections = []
    for i, (phase, _, cycle) in enumerate(run_steps(record)):
        s = steps[str(i)]
        title = "prefill" if cycle is None else f"cycle {cycle + 1} · {phase}"
        sections.append(
            f"<section class='step' data-title='{esc_attr(title)}'>"
            f"<div class='status'>{s['status']}</div><div class='kv'>{s['kv'][0]}</div>"
            f"<div class='story' data-role='narrative'>{s['story']}</div></section>"
        )
    title = esc_attr(record.title or "specviz run")
    script = (stage_js.core_js() + _GLUE).replace("</script", "<\\/script")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{title} — specviz</title>"
        f"<style>{_PAGE_CSS}{stage_js.stage_css()}</style>{stylesheet()}</head><body>"
        "<header><button id='back' aria-label='Back one step'>← Back</button>"
        "<button id='next' class='primary' aria-label='Next step'>Next →</button>"
        f"<span id='counter' aria-live='polite'></span><span style='margin-left:auto'>{title} · "
        f"{esc_attr(record.pair)}</span></header>"
        "<main><div id='stage'></div>"
        "<p class='nojs-note'>Scripts are off: every step of the run follows, one after the other.</p>"
        f"<div class='steps'>{''.join(sections)}</div></main>"
        f"<script type='module'>{script}</script></body></html>"
    )
