"""The stage the room sees (issue 35, part 0), measured in a real headless Chromium on the default pair.

Each test opens the app as a person would (tests/test_browser_lecture.py's `_lecture_page`: lecture
mode switched on by a click, the sidebar folded away; or the normal layout at a student's 1366x768),
steps with mouse clicks on Next phase, and measures the page as the browser laid it out
(getBoundingClientRect, getComputedStyle) at 1920x1080 and 1280x720:

* **resolve**: the table of what the token was drawn from (viz/dist_table.py: p, q and the residual
  norm(max(0, p − q)), or p_K+1) lies under the narrative, inside the viewport, its numbers printed in
  type that scales with the screen, none cut.

Figures go to test-artifacts/browser/stage-layout-*.json, screenshots beside them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_browser_lecture import SIZES, _lecture_page, _settle, _step

from bench.load import CHROMIUM, start_server, stop_server
from specviz.viz.style import PHASE_TITLES

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-artifacts" / "browser"
PHASES = ("draft", "verify", "accept", "resolve", "rollback")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_server("default", ready_s=180)
    try:
        yield url
    finally:
        stop_server(proc)


def _to_phase(page, phase: str) -> None:
    """Mouse clicks on Next phase until the stage shows `phase` of the first cycle it reaches."""
    for _ in range(len(PHASES) + 1):
        if page.evaluate("document.querySelector('.svs').dataset.title || ''").endswith(PHASE_TITLES[phase]):
            return
        _step(page, page.evaluate("window.__specvizStage.state.cur") + 1)
    raise AssertionError(f"never reached {phase}")


# The resolve table as laid out: its box, the side column's, and each cell's text, size and box.
TABLE_JS = r"""() => {
  const t = document.querySelector('.svs .svs-story [data-role=resolve-chart]');
  if (!t) return null;
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const cells = [...t.querySelectorAll('th, td')].map(c => ({text: c.textContent, box: box(c),
    px: parseFloat(getComputedStyle(c).fontSize), over: c.scrollWidth > c.clientWidth + 1}));
  return {vw: innerWidth, vh: innerHeight, box: box(t), side: box(document.querySelector('.svs .svs-side')),
    story: box(document.querySelector('.svs .svs-story')),
    heads: [...t.querySelectorAll('thead th')].map(c => c.textContent),
    caption: t.querySelector('caption').textContent, cells,
    nums: [...t.querySelectorAll('td')].map(c => c.textContent),
    storyPx: parseFloat(getComputedStyle(document.querySelector('.svs .svs-story')).fontSize)};
}"""
NUMBER = re.compile(r"^(—|[01]\.\d{3}|\d\.\de-\d\d)$")
MIN_TABLE_PX = {1080: 21.0, 720: 16.0}  # 0.9 of the narrative's 24 / 18 px


def _inside(box: list[float], vw: float, vh: float) -> bool:
    top, bottom, left, right = box
    return top >= -0.5 and left >= -0.5 and bottom <= vh + 0.5 and right <= vw + 0.5


@pytest.mark.parametrize("width, height", SIZES)
def test_resolve_shows_p_q_and_the_residual_with_their_numbers(server: str, browser, width: int, height: int) -> None:
    """At resolve in lecture mode the narrative is followed by the table of what the token was drawn
    from: a row per token, a number per column (p, q, r after a rejection; p_K+1 after a bonus), every
    number printed and whole, in type ≥ 21 px at 1080 and ≥ 16 px at 720, inside the viewport and the
    narrative's box."""
    errors: list[str] = []
    page = _lecture_page(browser, server, width, height, errors)
    figures = []
    for cycle in range(2):  # two cycles' resolve: a rejection and a bonus are both likely at K = 5
        _to_phase(page, "resolve")
        _settle(page)
        m = page.evaluate(TABLE_JS)
        assert m is not None, "no table under the narrative at resolve"
        page.screenshot(path=str(OUT / f"stage-layout-resolve-{width}x{height}-{cycle + 1}.png"))
        figures.append({k: m[k] for k in ("box", "story", "heads", "caption", "nums")} |
                       {"minPx": min(c["px"] for c in m["cells"])})
        heads = m["heads"]
        assert heads[0] == "token" and len(heads) in (2, 4), heads
        if len(heads) == 4:
            j = heads[1][1:]
            assert heads[1:] == [f"p{j}", f"q{j}", f"r{j}"] and f"norm(max(0, p{j} − q{j}))" in m["caption"], m
        assert len(m["nums"]) == (len(heads) - 1) * (len(m["cells"]) // len(heads) - 1), m["nums"]
        assert all(NUMBER.match(n) for n in m["nums"]), m["nums"]
        assert not [c for c in m["cells"] if c["over"]], m["cells"]
        assert min(c["px"] for c in m["cells"]) >= MIN_TABLE_PX[height], m["cells"]
        assert _inside(m["box"], m["vw"], m["vh"]), m["box"]
        s = m["story"]
        assert s[0] - 0.5 <= m["box"][0] and m["box"][1] <= s[1] + 0.5 and m["box"][3] <= s[3] + 0.5, (m["box"], s)
        _step(page, page.evaluate("window.__specvizStage.state.cur") + 1)  # on to the rollback: no table there
        assert page.evaluate(TABLE_JS) is None
    (OUT / f"stage-layout-resolve-{width}x{height}.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    page.close()
    assert not errors, errors
