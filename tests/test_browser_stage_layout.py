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
from test_browser_lecture import (
    MEASURE_JS,
    MIN_NARRATIVE_PX,
    SIZES,
    _app_page,
    _check,
    _fixed_k,
    _lecture_page,
    _rerun,
    _settle,
    _sidebar,
    _step,
)

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


MIN_STRIP_PX = {1080: 19.5, 720: 15.0}  # the cells' token type, by screen height (it was 13 px)


def _strip_bad(m: dict) -> list[str]:
    """What is wrong with the strip at one measured step: its newest chip out of sight, its type under
    the cells' (scaled by the screen), or its box over the pictures or the narrative's column."""
    where, bad = f"{m['vw']}x{m['vh']} {m['title']}", []
    top, bottom, left, right = m["last"]
    b = m["box"]
    if not (_inside(m["last"], m["vw"], m["vh"]) and top >= b[0] - 0.5 and bottom <= b[1] + 0.5):
        bad.append(f"{where}: the newest chip {m['lastText']!r} at {m['last']} is out of sight (strip {b})")
    if m["px"] < MIN_STRIP_PX[m["vh"]]:
        bad.append(f"{where}: strip type {m['px']} px")
    if b[1] > m["pics"][0] + 0.5 or b[3] > m["side"][2] + 0.5:
        bad.append(f"{where}: the strip {b} overlaps the pictures {m['pics']} or the narrative {m['side']}")
    return bad


def test_lecture_mode_shows_the_newest_generated_text_on_the_first_screen(server: str, browser) -> None:
    """Every phase of a cycle in lecture mode, at 1920x1080 and 1280x720: the generated-text strip sits
    above the picture, in its column, its newest chip inside the viewport and inside the strip's
    visible box (the strip shows its last line), its type scaling with the screen as the cells' (≥ 19.5 px
    at 1080, ≥ 15 px at 720: the strip was 13 px and below the fold)."""
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


def _quiz_lecture_page(browser, server: str, width: int, height: int, errors: list[str]):
    """A fresh page with fixed K, the quiz on and then lecture mode on, each switched by a click."""
    page = _app_page(server, browser, errors, width, height)
    _fixed_k(page)
    _rerun(page, lambda: page.get_by_text("Quiz: predict").first.click())
    _rerun(page, lambda: page.get_by_text("Lecture mode").first.click())
    page.wait_for_function("() => !!document.querySelector('.svs .svkv.svkv-lecture') && document.querySelector("
                           "\"section[data-testid='stSidebar']\").getAttribute('data-collapsed') === 'true'",
                           timeout=300_000, polling=100)
    _settle(page)
    return page


QUIZ_JS = r"""() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const form = document.querySelector('.st-key-quiz_form');
  const texts = form ? [...form.querySelectorAll('label, [data-testid=stWidgetLabel] p, [data-testid=stMarkdown] p')]
    .filter(e => e.getBoundingClientRect().height > 0) : [];
  return {vw: innerWidth, vh: innerHeight, title: document.querySelector('.svs').dataset.title,
    cards: [...document.querySelectorAll('.svs [data-role=drafts] .svkv-draft')].map(box),
    bars: [...document.querySelectorAll('.svs [data-role=drafts] .svkv-draft .svkv-barrow')].map(box),
    form: form && box(form), labelPx: texts.map(e => parseFloat(getComputedStyle(e).fontSize))};
}"""
MIN_QUIZ_PX = {1080: 20.0, 720: 17.0}


@pytest.mark.parametrize("width, height", SIZES)
def test_the_quiz_in_lecture_mode_leaves_the_draft_cards_whole(server: str, browser, width: int, height: int) -> None:
    """Lecture mode with the quiz on, at the verify phase of two cycles (where the question is asked):
    every draft card, with its q and p rows, lies inside the viewport (they were cut at the bottom
    edge), the question's box too, and its labels and choices are in the narrative's scale (≥ 20 px at
    1080, ≥ 17 px at 720; Streamlit's are 14 px)."""
    errors: list[str] = []
    page = _quiz_lecture_page(browser, server, width, height, errors)
    figures = []
    for cycle in range(2):
        _to_phase(page, "verify")
        page.wait_for_selector(".st-key-quiz_form", timeout=120_000)
        _settle(page)
        m = page.evaluate(QUIZ_JS)
        figures.append(m)
        page.screenshot(path=str(OUT / f"stage-layout-quiz-{width}x{height}-{cycle + 1}.png"))
        assert m["cards"] and m["bars"], m
        assert all(_inside(b, m["vw"], m["vh"]) for b in m["cards"] + m["bars"]), m
        assert m["form"] is not None and _inside(m["form"], m["vw"], m["vh"]), m["form"]
        assert m["labelPx"] and min(m["labelPx"]) >= MIN_QUIZ_PX[height], m["labelPx"]
        # answer, so the next cycle asks again (a pending question holds the first Next)
        _rerun(page, lambda: page.locator(".st-key-quiz_form label").filter(has_text="0").first.click())
        _rerun(page, lambda: page.locator(".st-key-quiz_submit button").click())
        _settle(page)
    (OUT / f"stage-layout-quiz-{width}x{height}.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    page.close()
    assert not errors, errors


def test_an_auto_run_names_the_chosen_k_in_its_chip(server: str, browser) -> None:
    """A new run of the default pair is auto: at each cycle's steps the status line's first chip says
    the K the cost law chose for it ("K = 3 (auto)"), as the narrative's own sentence does."""
    errors: list[str] = []
    page = _app_page(server, browser, errors)
    for _ in range(2):
        _step(page, page.evaluate("window.__specvizStage.state.cur") + 1)
        chip = page.evaluate("document.querySelector('.svs .svs-status code').textContent")
        story = page.locator(".svs .svs-story").inner_text()
        chosen = re.search(r"Auto \(this machine's cost law\) chose (K = \d+|a plain step)", story)
        assert re.fullmatch(r"K = \d+ \(auto\)", chip), chip
        if chosen and chosen.group(1) != "a plain step":
            assert chip == chosen.group(1) + " (auto)", (chip, chosen.group(0))
    page.close()
    assert not errors, errors


TOAST_JS = r"""(words) => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const toast = [...document.querySelectorAll('[data-testid=stToast]')].find(t => t.textContent.includes(words));
  if (!toast) return null;
  const text = toast.querySelector('[data-testid=stToastText]'), p = text.querySelector('p') || text;
  const more = toast.querySelector('[data-testid=stToastViewButton]');
  return {vw: innerWidth, vh: innerHeight, box: box(toast), scroll: [text.scrollHeight, text.clientHeight],
    px: parseFloat(getComputedStyle(p).fontSize), more: !!more && more.getBoundingClientRect().height > 0,
    text: text.textContent, side: box(document.querySelector('.svs .svs-side'))};
}"""


@pytest.mark.parametrize("width, height", SIZES)
def test_a_scenarios_lesson_is_read_whole_in_lecture_mode(server: str, browser, width: int, height: int) -> None:
    """A scenario loaded in lecture mode says its lesson in a toast: the whole text shown (Streamlit clamps
    a toast to three lines behind "view more"), in type ≥ 21 px at 1080 and ≥ 16 px at 720, inside the
    viewport and clear of the narrative's column."""
    from specviz.scenarios import load_scenarios

    errors: list[str] = []
    page = _lecture_page(browser, server, width, height, errors)
    scenario = max((s for s in load_scenarios() if s.tree_width <= 1), key=lambda s: len(s.lesson))
    _sidebar(page, True)
    button = page.locator(f".st-key-scenario_{scenario.id} button").first
    if not button.is_visible():  # the gallery is open on a fresh page, folded once a run was shown
        page.locator("section[data-testid='stSidebar'] summary").filter(has_text="Scenario gallery").first.click()
    button.click()
    words = scenario.lesson[:40]
    page.wait_for_function(f"() => !!({TOAST_JS})({json.dumps(words)})", timeout=300_000, polling=100)
    _sidebar(page, False)
    m = page.evaluate(TOAST_JS, words)
    page.screenshot(path=str(OUT / f"stage-layout-lesson-{width}x{height}.png"))
    (OUT / f"stage-layout-lesson-{width}x{height}.json").write_text(json.dumps(m, indent=1), encoding="utf-8")
    assert not m["more"] and m["scroll"][0] <= m["scroll"][1] + 1, m
    assert " ".join(scenario.lesson.split())[-30:] in " ".join(m["text"].split()), (scenario.lesson, m["text"])
    assert m["px"] >= (21.0 if height == 1080 else 16.0), m["px"]
    assert _inside(m["box"], m["vw"], m["vh"]) and m["box"][3] <= m["side"][2] + 0.5, (m["box"], m["side"])
    page.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def default_run_page(tmp_path_factory) -> Path:
    """The standalone page of 2 cycles (K = 5) of the default pair, with the app's prompt template."""
    import specviz
    from specviz.prompting import encode_prompt
    from specviz.ui.runs import record_of
    from specviz.ui.state import advance_cycle, start_live_run
    from specviz.viz.standalone import run_html

    pair = specviz.load_default_pair()
    cfg = specviz.DecodeConfig(k=5, page_size=16, seed=1)
    run = start_live_run(1, "A lecture prepared at home", (), pair, cfg,
                         encode_prompt(pair.tokenizer, "Explain in a few sentences why the sky is blue."))
    for _ in range(2):
        run = advance_cycle(run)
    path = tmp_path_factory.mktemp("standalone") / "run.html"
    path.write_text(run_html(record_of(run)), encoding="utf-8")
    return path


HEADER_JS = r"""() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const h = document.querySelector('header');
  return {header: box(h), parts: [...h.querySelectorAll('button, #counter')].map(e => ({box: box(e),
    over: e.scrollWidth > e.clientWidth + 1, text: e.textContent}))};
}"""


@pytest.mark.parametrize("width, height", SIZES)
def test_the_standalone_page_opens_in_the_lecture_layout(browser, default_run_page: Path, width: int,
                                                         height: int) -> None:
    """The standalone run page of the default pair, every phase of two cycles at 1920x1080 and 1280x720:
    the lecture layout's bounds (tests/test_browser_lecture.py `_check`: cells by the six-character rule,
    unclipped, token text ≥ 18 / 14 px; drafts, verdicts and narrative inside the viewport; no text
    overflowing), the narrative in the lecture type (≥ 24 / 18 px: it was 16), the generated text's newest
    chip on the screen, and the header one line, its buttons and counter whole and inside the viewport."""
    errors: list[str] = []
    page = browser.new_page(viewport={"width": width, "height": height})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(default_run_page.as_uri())
    page.wait_for_function("() => window.__specvizStage && window.__specvizStage.state.cur === 0")
    bad, lowest = [], 0.0
    for n in range(2 * len(PHASES)):
        page.mouse.click(*_centre(page, "#next"))
        page.wait_for_function(f"() => window.__specvizStage.state.cur === {n + 1}")
        page.wait_for_function("() => document.querySelector('.svs').getAnimations({subtree: true})"
                               ".every(a => a.playState !== 'running')", polling=100)
        m = page.evaluate(MEASURE_JS)
        bad += _check(m, height, False, PHASES[n % len(PHASES)])
        lowest = max([lowest, *(b[1] for b in m["drafts"] + m["verdicts"] + m["narrative"])])
        bad += _strip_bad(page.evaluate(STRIP_JS))
        px = page.evaluate("parseFloat(getComputedStyle(document.querySelector('.svs .svs-story p')).fontSize)")
        if px < MIN_NARRATIVE_PX[height]:
            bad.append(f"{width}x{height} step {n + 1}: narrative {px} px")
        if n == 3:
            page.screenshot(path=str(OUT / f"stage-layout-standalone-{width}x{height}.png"))
    h = page.evaluate(HEADER_JS)
    assert h["header"][1] - h["header"][0] < 60, h  # one line
    for part in h["parts"]:
        assert _inside(part["box"], width, height) and not part["over"], part
    (OUT / f"stage-layout-standalone-{width}x{height}.json").write_text(json.dumps({"lowest": lowest, **h}, indent=1),
                                                                       encoding="utf-8")
    page.close()
    assert not bad, "\n".join(bad[:12])
    assert not errors, errors


def _centre(page, selector: str) -> tuple[float, float]:
    box = page.locator(selector).first.bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


# What a step changed, as laid out: the drafts panel's cards, their p rows, the verdicts, the corrected
# (bonus) card and the cache rows the phase changed.
ACTION_JS = r"""() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const all = s => [...document.querySelectorAll('.svs ' + s)].filter(e => e.getBoundingClientRect().height > 0)
    .map(box);
  return {vw: innerWidth, vh: innerHeight, title: document.querySelector('.svs').dataset.title,
    cards: all('[data-role=drafts] .svkv-draft[data-d]'), p: all('[data-role=drafts] .svkv-bar-p'),
    verdicts: all('[data-role=verdict]'), result: all('.svkv-result'), rows: all('[data-role=action]'),
    intro: all('.svs-intro'), introList: all('.svs-intro ol')};
}"""


def _on_screen(boxes: list, vh: float, line: float = 30.0) -> bool:
    """At least one box begins on the first screen, a line of it in view."""
    return any(b[0] >= -0.5 and b[0] + min(line, b[1] - b[0]) <= vh + 0.5 for b in boxes)


def test_a_student_alone_sees_what_each_step_changed_on_the_first_screen(server: str, browser) -> None:
    """The normal layout at 1366x768 (sidebar open, the guided start not dismissed): at every phase of two
    cycles, what the phase changed begins on the first screen -- the new draft cards, their p rows at
    verify, the verdicts, the corrected (bonus) card, the cache rows the rollback cut -- where they sat
    at y 648-2600 under both caches. The guided start folds to its first paragraph once stepping began."""
    errors: list[str] = []
    page = _app_page(server, browser, errors)
    _fixed_k(page)
    want = {"draft": ("cards",), "verify": ("p",), "accept": ("verdicts",), "resolve": ("result",),
            "rollback": ("rows",)}
    bad, figures = [], []
    start = page.evaluate("window.__specvizStage.state.cur")
    for n in range(2 * len(PHASES)):
        _step(page, start + 1 + n)
        m = page.evaluate(ACTION_JS)
        phase = PHASES[n % len(PHASES)]
        figures.append(m)
        for part in want[phase]:
            if not _on_screen(m[part], m["vh"]):
                bad.append(f"{m['title']}: {part} {m[part][:3]} not on the first screen")
        if not m["intro"] or m["introList"]:
            bad.append(f"{m['title']}: the guided start {m['intro']}, its list {m['introList']}")
        if n == 4:
            page.screenshot(path=str(OUT / "stage-layout-alone-1366x768-rollback.png"))
    (OUT / "stage-layout-alone-1366x768.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    page.close()
    assert not bad, "\n".join(bad)
    assert not errors, errors


GLOSS_JS = r"""() => [...document.querySelectorAll('.svs abbr.svs-gloss')].filter(e => {
  const r = e.getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight; })
  .map(e => { const r = e.getBoundingClientRect(); return {text: e.textContent, title: e.title,
    x: r.left + r.width / 2, y: r.top + r.height / 2}; })"""


def test_the_jargon_a_student_meets_is_explained_where_it_stands(server: str, browser) -> None:
    """The normal layout at 1366x768: stepping through a cycle, the terms of the glossary's table met on the
    first screen (K/V, logits, x_n, block table, residual, U(0,1), ...) carry their explanation; a mouse
    click (a tap) on one focuses it and shows the explanation as a popover beside it."""
    from specviz.viz.glossary import TERMS

    errors: list[str] = []
    page = _app_page(server, browser, errors)
    _fixed_k(page)
    meanings = {t.meaning for t in TERMS}
    met: dict[str, str] = {}
    start = page.evaluate("window.__specvizStage.state.cur")
    for n in range(len(PHASES)):
        _step(page, start + 1 + n)
        for g in page.evaluate(GLOSS_JS):
            assert g["title"] in meanings, g
            met.setdefault(g["text"].lower(), g["title"])
    assert {"k/v", "logits", "x_n", "residual"} <= set(met) and len(met) >= 6, sorted(met)
    g = page.evaluate(GLOSS_JS)[0]
    page.mouse.click(g["x"], g["y"])
    popover = page.evaluate("""() => { const e = document.activeElement;
      return e && e.matches('abbr.svs-gloss') ? {text: e.textContent, after: getComputedStyle(e, '::after').content,
        px: parseFloat(getComputedStyle(e, '::after').fontSize)} : null; }""")
    assert popover is not None and popover["text"] == g["text"], popover
    assert g["title"] in popover["after"] and popover["px"] >= 14, popover
    page.screenshot(path=str(OUT / "stage-layout-glossary-1366x768.png"))
    page.close()
    assert not errors, errors
