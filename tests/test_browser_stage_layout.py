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


# The generated-text strip as laid out: its box, its newest chip's box and type, the narrative's type,
# and the top of the pictures under it.
STRIP_JS = r"""() => {
  const stage = document.querySelector('.svs'), box = e => { const r = e.getBoundingClientRect();
    return [r.top, r.bottom, r.left, r.right]; };
  const text = stage.querySelector('.svs-strip [data-role=strip-text]');
  const chips = [...text.querySelectorAll('.svs-strip-lines > span[title]')];
  const last = chips[chips.length - 1], story = stage.querySelector('.svs-story p, .svs-story li');
  return {title: stage.dataset.title, vw: innerWidth, vh: innerHeight, box: box(text), last: box(last),
    lastText: last.textContent, chips: chips.length, px: parseFloat(getComputedStyle(last).fontSize),
    storyPx: parseFloat(getComputedStyle(story).fontSize), pics: box(stage.querySelector('.svs-pics')),
    side: box(stage.querySelector('.svs-side'))};
}"""


def _strip_bad(m: dict) -> list[str]:
    """What is wrong with the strip at one measured step: its newest chip out of sight, its type not
    the narrative's, or its box over the pictures or the narrative's column."""
    where, bad = f"{m['vw']}x{m['vh']} {m['title']}", []
    top, bottom, left, right = m["last"]
    b = m["box"]
    if not (_inside(m["last"], m["vw"], m["vh"]) and top >= b[0] - 0.5 and bottom <= b[1] + 0.5):
        bad.append(f"{where}: the newest chip {m['lastText']!r} at {m['last']} is out of sight (strip {b})")
    if abs(m["px"] - m["storyPx"]) > 0.5:
        bad.append(f"{where}: strip type {m['px']} px, narrative {m['storyPx']} px")
    if b[1] > m["pics"][0] + 0.5 or b[3] > m["side"][2] + 0.5:
        bad.append(f"{where}: the strip {b} overlaps the pictures {m['pics']} or the narrative {m['side']}")
    return bad


def test_lecture_mode_shows_the_newest_generated_text_on_the_first_screen(server: str, browser) -> None:
    """Every phase of a cycle in lecture mode, at 1920x1080 and 1280x720: the generated-text strip sits
    above the picture, in its column, its newest chip inside the viewport and inside the strip's
    visible box (the strip shows its last lines), its type the narrative's (24 px at 1080, 18 px at
    720: the strip was 13 px and below the fold)."""
    errors: list[str] = []
    page = _lecture_page(browser, server, *SIZES[0], errors)
    bad, figures = [], {}
    start = page.evaluate("window.__specvizStage.state.cur")
    for n in range(len(PHASES)):
        _step(page, start + 1 + n)
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            _settle(page)
            m = page.evaluate(STRIP_JS)
            figures.setdefault(f"{width}x{height}", []).append({k: m[k] for k in ("title", "box", "last", "px")})
            bad += _strip_bad(m)
            if n == 3:
                page.screenshot(path=str(OUT / f"stage-layout-strip-{width}x{height}.png"))
        page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
    (OUT / "stage-layout-strip.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    page.close()
    assert not bad, "\n".join(bad)
    assert not errors, errors
