"""Lecture mode on the real default pair, in a real headless Chromium (issue 26's bounds).

One `streamlit run app.py` with the default pair (module fixture) serves a page per shape: the chain
(K = 5) and the token tree (width 3, 16 nodes, depth K = 5). Lecture mode is switched on (the
sidebar folds away by itself), then every phase of 4 cycles is stepped, the prompt is changed
(the sidebar opened, a new prompt typed, the sidebar folded again: the "New run" notice is a toast,
the stage does not move), and every phase of 4 more cycles is stepped. After each phase the page is
measured at 1920x1080 and at 1280x720 (the viewport resized in place: the same step, both sizes):

* **Token text in the cells**: every visible cache cell with a token shows it by the six-character
  rule (whole up to 6 characters of its display form, `data-token`, else its first 5 and "…") in its
  `data-role="token-text"` element, which lies inside the cell, unclipped; token text ≥ 18 px at
  1080 px, ≥ 14 px at 720 px.
* **One screen**: the drafts panel (`data-role="drafts"`), each verdict (`data-role="verdict"`) and
  the narrative (`data-role="narrative"`) inside the viewport; for a tree cycle the tree panel
  (`data-role="tree"`, `role="figure"`, its label naming the phase) and every section it shows.
* **Nothing overflows**: no text-bearing element of the stage has `scrollWidth > clientWidth`, none
  sticks out of its parent's box, none out of the picture's column.

The figures (the share of cells by the rule, the smallest token text, the lowest bottom edge of the
hooks) go to test-artifacts/browser/lecture-bounds-<shape>.json; screenshots of every phase of the
first cycle, before and after the prompt change, at both sizes, to test-artifacts/browser/.

The stage the room sees (issue 35, part 0), clicked like a person: every step is a mouse click at the
centre of Next phase, where the page's own hit test must find the button (a click dispatched inside the
page skips hit-testing: Streamlit's header once took every click on the buttons, unseen). At both sizes:
the hit test at each button and the sidebar's toggle, a real click advancing the stage; the computed
type (narrative ≥ 24 / 18 px, a tree's node text ≥ 18 / 14 px), the narrative whole in its box and the
phase heading in view at every phase; the settings chips following a live change, a new run's toast
clear of the narrative, an emptied prompt keeping the stage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.load import CHROMIUM, start_server, stop_server
from specviz.viz.style import PHASE_TITLES

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-artifacts" / "browser"
SIZES = ((1920, 1080), (1280, 720))
MIN_TOKEN_PX = {1080: 18.0, 720: 14.0}
CYCLES = 4
PHASES = ("draft", "verify", "accept", "resolve", "rollback")
NEW_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]

# Everything the bounds need, measured in the page at the step on screen.
MEASURE_JS = r"""() => {
  const vw = innerWidth, vh = innerHeight, stage = document.querySelector('.svs');
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const inside = r => r.top >= -0.5 && r.left >= -0.5 && r.bottom <= vh + 0.5 && r.right <= vw + 0.5;
  const rule = t => { const a = Array.from(t); return a.length <= 6 ? t : a.slice(0, 5).join('') + '\u2026'; };
  const cells = {visible: 0, byRule: 0, clipped: [], wrong: [], minPx: null};
  for (const c of stage.querySelectorAll('.svkv-cell[data-token]')) {
    const r = c.getBoundingClientRect();
    if (!(r.width > 0 && r.height > 0 && inside(r))) continue;
    cells.visible += 1;
    const t = c.querySelector('[data-role=token-text]');
    if (t && t.textContent === rule(c.dataset.token)) cells.byRule += 1; else cells.wrong.push(c.dataset.token);
    if (!t) continue;
    const tr = t.getBoundingClientRect();
    if (t.scrollWidth > t.clientWidth + 1 || tr.left < r.left - 0.5 || tr.right > r.right + 0.5 ||
        tr.top < r.top - 0.5 || tr.bottom > r.bottom + 0.5) cells.clipped.push(c.dataset.token);
    const px = parseFloat(getComputedStyle(t).fontSize);
    cells.minPx = cells.minPx === null ? px : Math.min(cells.minPx, px);
  }
  // Text that does not fit: its own box (scrollWidth), its parent's box, the picture's column.
  const over = [], seen = new Set(), pics = stage.querySelector('.svs-pics').getBoundingClientRect();
  const walker = document.createTreeWalker(stage, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    if (!walker.currentNode.textContent.trim()) continue;
    let e = walker.currentNode.parentElement;
    while (e !== stage && getComputedStyle(e).display.startsWith('inline')) e = e.parentElement;
    if (seen.has(e) || e === stage || !shown(e) || e.closest('.svkv-sr, .svtree-sr, .svs-notice')) continue;
    seen.add(e);
    const what = (e.className || e.tagName) + ': ' + e.textContent.slice(0, 30);
    if (e.scrollWidth > e.clientWidth + 1) over.push(['scrollWidth', what, e.scrollWidth, e.clientWidth]);
    let up = e.parentElement;
    while (up !== stage && getComputedStyle(up).display === 'contents') up = up.parentElement;
    const a = e.getBoundingClientRect(), b = up.getBoundingClientRect();
    if (up !== stage && (a.right > b.right + 1 || a.left < b.left - 1)) over.push(['parent', what, a.right, b.right]);
    if (e.closest('.svs-pics') && a.right > pics.right + 1) over.push(['column', what, a.right, pics.right]);
  }
  const hooks = sel => [...stage.querySelectorAll(sel)].filter(shown).map(box);
  const tree = stage.querySelector('.svs-pic > [data-role=tree]');
  const sections = tree ? [...tree.querySelectorAll(':scope > section')].filter(shown).map(box) : [];
  return {title: stage.dataset.title, vw, vh, cells, over: over.slice(0, 12),
    drafts: hooks('[data-role=drafts]'), verdicts: hooks('[data-role=verdict]'),
    narrative: hooks('[data-role=narrative]'),
    tree: tree && shown(tree) ? {box: box(tree), role: tree.getAttribute('role'),
      label: tree.getAttribute('aria-label'), sections, font: parseFloat(getComputedStyle(tree).fontSize)} : null,
    alerts: [...document.querySelectorAll("[data-testid='stMain'] [data-testid='stAlert']")].filter(shown).length,
    stageTop: stage.getBoundingClientRect().top};
}"""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc, url = start_server("default", ready_s=180)
    try:
        yield url
    finally:
        stop_server(proc)


# Streamlit marks its app root with the script run's state (`data-test-script-state`, for its own
# end-to-end tests). The running indicator (stStatusWidget) shows only some time into a run, so its
# absence does not say that no run is out. A watcher notes every run that starts from the moment
# it is armed (`_rerun`). Waits poll on a timer (`polling=100`), not on animation frames: a wait
# should not depend on the page drawing (a CI run once waited 300 s on a page that drew no frame).
APP = "document.querySelector(\"[data-testid='stApp']\")"
ARM_JS = f"""() => {{
  const app = {APP};
  if (window.__svWatch) window.__svWatch.disconnect();
  window.__svRan = false;
  window.__svWatch = new MutationObserver(records => {{
    if (records.some(r => r.oldValue === 'running') || app.dataset.testScriptState === 'running') window.__svRan = true;
  }});
  window.__svWatch.observe(app, {{attributes: true, attributeOldValue: true,
                                  attributeFilter: ['data-test-script-state']}});
}}"""
RAN_JS = f"() => window.__svRan && {APP}.dataset.testScriptState === 'notRunning'"


def _rerun(page, action) -> None:
    """Do `action` (a widget change), then wait for the script run it starts to end, and settle."""
    page.evaluate(ARM_JS)
    action()
    page.wait_for_function(RAN_JS, timeout=300_000, polling=100)
    _settle(page)


def _settle(page) -> None:
    """The stage is mounted, its motion has run (glides, fades) and no script run is out."""
    page.wait_for_function(f"() => {APP}.dataset.testScriptState === 'notRunning'", timeout=300_000, polling=100)
    page.wait_for_selector("[data-testid='stStatusWidget']", state="detached", timeout=300_000)
    # The buttons can be drawn a moment before the component mounts its stage: wait for it too.
    page.wait_for_function("() => { const stage = document.querySelector('.svs'); return !!stage && "
                           "stage.getAnimations({subtree: true}).every(a => a.playState !== 'running'); }",
                           timeout=60_000, polling=100)
    page.wait_for_timeout(150)


def _app_page(server: str, browser, errors: list[str], width: int = 1366, height: int = 768):
    """A new page of the app at width x height (the normal layout: lecture mode off), its stage mounted
    and still; the page's errors go to `errors`."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(300_000)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server, wait_until="domcontentloaded")
    page.locator(".st-key-next_phase button").first.wait_for(timeout=300_000)
    _settle(page)
    return page


def _set_number(page, label: str, value: str) -> None:
    """Type `value` into the sidebar's number box `label` (once it is enabled), then let the run end."""
    page.wait_for_function(f"() => [...document.querySelectorAll(\"input[aria-label='{label}']\")]"
                           ".some(e => !e.disabled)", timeout=120_000, polling=100)
    box = page.locator(f"input[aria-label='{label}']")
    box.fill(value)
    _rerun(page, lambda: box.press("Enter"))
    assert box.input_value() == value, (label, box.input_value())


HIT_JS = """([x, y, sel]) => { const e = document.elementFromPoint(x, y), b = document.querySelector(sel);
  return {inside: !!e && !!b && b.contains(e),
          hit: e ? e.tagName + '.' + e.className + (e.closest('header') ? ' (header)' : '') : null}; }"""


def _fixed_k(page) -> None:
    """Fixed K (K = 5): a new run of the default pair drafts as this machine's cost law says, which may
    be nothing (a plain step) or a smaller tree; the bounds here are those of the chosen K and tree."""
    _rerun(page, lambda: page.get_by_text("Fixed K", exact=True).first.click())


def _mouse_click(page, selector: str) -> None:
    """Click like a person: the mouse at the centre of what `selector` names, which must be what the
    page hit-tests there (a click dispatched inside the page skips hit-testing, and once hid that
    Streamlit's header took every click on the stage's buttons)."""
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    hit = page.evaluate(HIT_JS, [x, y, selector])
    assert hit["inside"], (selector, hit)
    page.mouse.click(x, y)


def _step(page, step: int) -> None:
    """Next phase, by a mouse click on the page's button (a lecturer with a mouse)."""
    _mouse_click(page, ".st-key-next_phase button")
    page.wait_for_function(f"() => {{ const s = window.__specvizStage.state; return s.cur === {step} && !s.waiting; }}",
                           timeout=300_000, polling=100)
    _settle(page)


def _sidebar(page, open_it: bool) -> None:
    """Streamlit's own toggle (lecture mode folded the sidebar away), clicked by the mouse."""
    button = "[data-testid='stExpandSidebarButton']" if open_it else "button[aria-label='Collapse sidebar']"
    page.locator(button).first.click()
    page.wait_for_function(f"() => document.querySelector(\"section[data-testid='stSidebar']\")"
                           f".getAttribute('data-collapsed') === '{str(not open_it).lower()}'",
                           timeout=30_000, polling=100)
    page.wait_for_timeout(600)


def _check(m: dict, height: int, tree: bool, phase: str) -> list[str]:
    """What is wrong with one measured step (an empty list: every bound holds)."""
    where, bad = f"{m['vw']}x{m['vh']} {m['title']}", []
    cells = m["cells"]
    if cells["visible"]:
        if cells["byRule"] < 0.95 * cells["visible"] or cells["clipped"]:
            bad.append(f"{where}: cells {cells}")
        if cells["minPx"] < MIN_TOKEN_PX[height]:
            bad.append(f"{where}: token text {cells['minPx']} px")
    elif not (tree and phase != "rollback"):  # a tree's draft to resolve give the screen to the tree
        bad.append(f"{where}: no cache cell in view")
    if m["over"]:
        bad.append(f"{where}: overflowing text {m['over']}")
    hooks = {"narrative": m["narrative"]}
    if tree:
        t = m["tree"]
        if t is None or t["role"] != "figure" or PHASE_TITLES[phase] not in t["label"]:
            bad.append(f"{where}: tree panel {t}")
        else:
            hooks["tree"] = [t["box"], *t["sections"]]
    else:
        hooks |= {"drafts": m["drafts"], "verdicts": m["verdicts"]}
        if not m["drafts"] or (phase not in ("draft", "verify") and len(m["verdicts"]) < 1):
            bad.append(f"{where}: drafts {m['drafts']} verdicts {m['verdicts']}")
    for name, boxes in hooks.items():
        for top, bottom, left, right in boxes:
            if top < -0.5 or left < -0.5 or bottom > m["vh"] + 0.5 or right > m["vw"] + 0.5:
                bad.append(f"{where}: {name} outside the viewport: {[top, bottom, left, right]}")
    if m["alerts"]:
        bad.append(f"{where}: {m['alerts']} banner(s) above the stage")
    return bad


def _measure_both(page, tree: bool, phase: str, figures: dict, shot: str | None) -> list[str]:
    bad = []
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(250)  # the stage refits a tree panel on resize
        _settle(page)
        m = page.evaluate(MEASURE_JS)
        bad += _check(m, height, tree, phase)
        f = figures.setdefault(f"{width}x{height}", {"steps": 0, "visible": 0, "byRule": 0, "minPx": None,
                                                    "lowest": 0.0, "treeFontMin": None})
        f["steps"] += 1
        f["visible"] += m["cells"]["visible"]
        f["byRule"] += m["cells"]["byRule"]
        if m["cells"]["minPx"] is not None:
            f["minPx"] = min(f["minPx"] or 99.0, m["cells"]["minPx"])
        boxes = m["drafts"] + m["verdicts"] + m["narrative"] + ([m["tree"]["box"], *m["tree"]["sections"]]
                                                                if m["tree"] else [])
        f["lowest"] = max([f["lowest"], *(b[1] for b in boxes)])
        if m["tree"]:
            f["treeFontMin"] = min(f["treeFontMin"] or 99.0, m["tree"]["font"])
        if shot:
            page.screenshot(path=str(OUT / f"lecture-{width}x{height}-{shot}.png"))
    page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
    return bad


def _walk(page, tree: bool, first: int, figures: dict, shots: str) -> list[str]:
    """Every phase of CYCLES cycles from step `first`, measured at both sizes."""
    bad = []
    for n in range(CYCLES * len(PHASES)):
        _step(page, first + n)
        phase = PHASES[n % len(PHASES)]
        shot = f"{shots}-c1-{n + 1}-{phase}" if n < len(PHASES) else None
        bad += _measure_both(page, tree, phase, figures, shot)
    return bad


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_lecture_mode_one_screen_and_token_text_at_both_sizes(server: str, browser, shape: str) -> None:
    tree = shape == "tree"
    errors: list[str] = []
    page = browser.new_page(viewport={"width": SIZES[0][0], "height": SIZES[0][1]})
    page.set_default_timeout(300_000)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server, wait_until="domcontentloaded")
    page.locator(".st-key-next_phase button").first.wait_for(timeout=300_000)
    _settle(page)
    _fixed_k(page)
    if tree:
        _set_number(page, "Tree width (1 = chain)", "3")
    _rerun(page, lambda: page.get_by_text("Lecture mode").first.click())
    page.wait_for_function("() => !!document.querySelector('.svs .svkv.svkv-lecture')", timeout=300_000, polling=100)
    page.wait_for_function("() => document.querySelector(\"section[data-testid='stSidebar']\")"
                           ".getAttribute('data-collapsed') === 'true'", timeout=60_000, polling=100)
    _settle(page)
    assert page.evaluate("window.__specvizStage.state.cur") == 0
    figures: dict = {}
    bad = _walk(page, tree, 1, figures, f"{shape}-before")

    # A new prompt: the sidebar opened by its own toggle, the prompt typed, the sidebar folded again.
    run = page.evaluate("window.__specvizStage.state.run")
    top = page.evaluate("document.querySelector('.svs').getBoundingClientRect().top")
    _sidebar(page, True)
    prompt = page.locator("textarea[aria-label='Prompt']")
    prompt.fill(NEW_PROMPT)
    prompt.press("Control+Enter")
    page.wait_for_function(f"() => window.__specvizStage.state.run !== {run}", timeout=300_000, polling=100)
    page.wait_for_selector("[data-testid='stToast']", timeout=60_000)  # "New run: the prompt changed", a toast
    assert "prompt changed" in page.locator("[data-testid='stToast']").first.inner_text()
    page.evaluate("document.activeElement && document.activeElement.blur()")  # the arrows step again
    _sidebar(page, False)
    _settle(page)
    assert abs(page.evaluate("document.querySelector('.svs').getBoundingClientRect().top") - top) < 1
    bad += _walk(page, tree, page.evaluate("window.__specvizStage.state.cur") + 1, figures, f"{shape}-after")
    page.close()

    for f in figures.values():
        f["share"] = round(f["byRule"] / f["visible"], 4) if f["visible"] else None
    (OUT / f"lecture-bounds-{shape}.json").write_text(json.dumps(figures, indent=1), encoding="utf-8")
    assert not bad, "\n".join(bad[:20])
    for size, f in figures.items():
        assert f["visible"] and f["share"] >= 0.95, (size, f)
    assert not errors, errors


BIG_TREE_JS = r"""() => {
  const t = document.querySelector('.svs .svs-pic > [data-role=tree]');
  if (!t) return null;
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const cs = getComputedStyle(t), sec = s => t.querySelector(`:scope > section${s}`);
  const tree = sec('.svtree-treesec'), mask = sec('[data-role=tree-mask]');
  return {vw: innerWidth, vh: innerHeight, box: box(t), label: t.getAttribute('aria-label'),
    nodes: t.querySelectorAll('[data-role=tree-node]').length, font: parseFloat(cs.fontSize),
    scrolls: ['auto', 'scroll'].includes(cs.overflowY) && t.scrollHeight > t.clientHeight + 1,
    tree: tree && box(tree), mask: mask && mask.getBoundingClientRect().height > 0 ? box(mask) : null};
}"""


@pytest.mark.parametrize("width, height", SIZES)
def test_a_128_node_tree_stays_in_its_panel_with_the_mask_beside_it(server: str, browser, width: int,
                                                                      height: int) -> None:
    """The largest tree the sidebar allows (width 8, 128 nodes): in lecture mode, at every phase of a
    cycle, the tree panel lies inside the viewport -- shrunk to fit, or scrolling inside its own box
    -- and at verify the attention mask stands beside the tree, not below it."""
    errors: list[str] = []
    page = _app_page(server, browser, errors, width, height)
    _fixed_k(page)
    _set_number(page, "Tree width (1 = chain)", "8")
    _set_number(page, "Tree nodes (budget)", "128")
    _rerun(page, lambda: page.get_by_text("Lecture mode").first.click())
    page.wait_for_function("() => !!document.querySelector('.svs .svkv.svkv-lecture')", timeout=300_000, polling=100)
    _settle(page)
    start = page.evaluate("window.__specvizStage.state.cur")
    seen_nodes = 0
    for n, phase in enumerate(PHASES[:4]):  # the tree's own phases: draft, verify, accept, resolve
        _step(page, start + 1 + n)
        m = page.evaluate(BIG_TREE_JS)
        assert m is not None and PHASE_TITLES[phase] in m["label"], m
        top, bottom, left, right = m["box"]
        assert top >= -0.5 and left >= -0.5 and bottom <= m["vh"] + 0.5 and right <= m["vw"] + 0.5, m
        seen_nodes = max(seen_nodes, m["nodes"])
        if phase == "verify":
            assert m["mask"] is not None and m["mask"][0] < m["tree"][1] and m["mask"][2] >= m["tree"][3] - 1, m
        if n == 1:
            page.screenshot(path=str(OUT / f"lecture-{width}x{height}-tree128-verify.png"))
    assert seen_nodes > 64, seen_nodes  # the budget was really used: a big tree, not the default one
    page.close()
    assert not errors, errors


# ---------------------------------------------------------------- the stage the room sees (issue 35, part 0)

BUTTONS = ("next_phase", "next_cycle", "back", "play", "reset")
MIN_NARRATIVE_PX = {1080: 24.0, 720: 18.0}
MIN_TREE_NODE_PX = {1080: 18.0, 720: 14.0}

# Computed sizes, as the browser applies them (a stylesheet's rule can lose to Streamlit's own `p`
# rule, as the narrative's did), and what the room can see of the narrative and the heading.
ROOM_JS = r"""() => {
  const stage = document.querySelector('.svs'), px = e => parseFloat(getComputedStyle(e).fontSize);
  const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const min = (sel, root = stage) => { const all = [...root.querySelectorAll(sel)].filter(shown).map(px);
    return all.length ? Math.min(...all) : null; };
  const story = stage.querySelector('[data-role=narrative]'), heading = stage.querySelector('[data-role=phase]');
  const r = heading && heading.getBoundingClientRect();
  return {title: stage.dataset.title, vw: innerWidth, vh: innerHeight,
    narrativePx: min(':scope p, :scope li', story), statusPx: min('.svs-status p'),
    treeNodePx: min('[data-role=tree-node] .svtree-tok'),
    scroll: [story.scrollHeight, story.clientHeight],
    heading: heading && shown(heading) ? {box: [r.top, r.bottom, r.left, r.right], text: heading.textContent} : null};
}"""


def _lecture_page(browser, server: str, width: int, height: int, errors: list[str], tree_width: str | None = None):
    """A fresh page at width x height with lecture mode on (switched on by a mouse click on its toggle)."""
    page = _app_page(server, browser, errors, width, height)
    _fixed_k(page)
    if tree_width:
        _set_number(page, "Tree width (1 = chain)", tree_width)
    _rerun(page, lambda: page.get_by_text("Lecture mode").first.click())
    page.wait_for_function("() => !!document.querySelector('.svs .svkv.svkv-lecture') && document.querySelector("
                           "\"section[data-testid='stSidebar']\").getAttribute('data-collapsed') === 'true'",
                           timeout=300_000, polling=100)
    _settle(page)
    return page


@pytest.mark.parametrize("width, height", SIZES)
def test_a_mouse_click_on_the_stage_buttons_reaches_them(server: str, browser, width: int, height: int) -> None:
    """In lecture mode the buttons sit in Streamlit's header band: at the centre of each, the page's
    hit test finds the button (not the header), the sidebar's toggle stays reachable, the Deploy
    button and the ⋮ menu are gone, and a real mouse click on Next phase (and Playwright's actionable
    click, which refuses a covered element) advances the stage."""
    errors: list[str] = []
    page = _lecture_page(browser, server, width, height, errors)
    for key in BUTTONS:
        sel = f".st-key-{key} button"
        box = page.locator(sel).first.bounding_box()
        hit = page.evaluate(HIT_JS, [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, sel])
        assert hit["inside"], (key, hit)
    toggle = "[data-testid='stExpandSidebarButton']"
    box = page.locator(toggle).bounding_box()
    assert page.evaluate(HIT_JS, [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, toggle])["inside"]
    for hidden in ("stAppDeployButton", "stMainMenu"):
        assert page.locator(f"[data-testid='{hidden}']").is_hidden(), hidden
    start = page.evaluate("window.__specvizStage.state.cur")
    _step(page, start + 1)  # page.mouse at the button's centre
    page.locator(".st-key-next_phase button").first.click(timeout=30_000)
    page.wait_for_function(f"() => window.__specvizStage.state.cur === {start + 2}", timeout=300_000, polling=100)
    page.close()
    assert not errors, errors


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_type_scales_and_the_narrative_fits_at_every_phase(server: str, browser, shape: str) -> None:
    """One cycle in lecture mode, every phase at 1920x1080 and 1280x720: the narrative's computed type
    ≥ 24 px / ≥ 18 px (and the status line's as its box says), a token tree's node text ≥ 18 / 14 px,
    the narrative whole in its box (its closing lesson not scrolled out of sight), and the phase
    heading inside the viewport."""
    errors: list[str] = []
    page = _lecture_page(browser, server, *SIZES[0], errors, tree_width="3" if shape == "tree" else None)
    start, bad, seen = page.evaluate("window.__specvizStage.state.cur"), [], {}
    for n, phase in enumerate(PHASES):
        _step(page, start + 1 + n)
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            _settle(page)
            m = page.evaluate(ROOM_JS)
            where = f"{width}x{height} {m['title']}"
            sizes = {k: m[k] for k in ("narrativePx", "statusPx", "treeNodePx")}
            seen.setdefault(f"{width}x{height}", []).append(sizes)
            if m["narrativePx"] is None or m["narrativePx"] < MIN_NARRATIVE_PX[height]:
                bad.append(f"{where}: narrative {m['narrativePx']} px")
            if m["statusPx"] is None or m["statusPx"] < (18 if height == 1080 else 15):
                bad.append(f"{where}: status line {m['statusPx']} px")
            if shape == "tree" and phase != "rollback" and (m["treeNodePx"] or 0) < MIN_TREE_NODE_PX[height]:
                bad.append(f"{where}: tree node text {m['treeNodePx']} px")
            if m["scroll"][0] > m["scroll"][1] + 1:  # scrollHeight > clientHeight: the end is out of sight
                bad.append(f"{where}: the narrative scrolls inside its box {m['scroll']}")
            h = m["heading"]
            if h is None or h["text"] != m["title"] or h["box"][0] < -0.5 or h["box"][1] > height + 0.5 or \
                    h["box"][2] < -0.5 or h["box"][3] > width + 0.5:
                bad.append(f"{where}: phase heading {h}")
        page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
    (OUT / f"lecture-type-{shape}.json").write_text(json.dumps(seen, indent=1), encoding="utf-8")
    page.close()
    assert not bad, "\n".join(bad)
    assert not errors, errors


CHIPS_JS = "() => [...document.querySelectorAll('.svs .svs-status code')].map(e => e.textContent)"
BOX_JS = ("s => { const r = document.querySelector(s).getBoundingClientRect(); "
            "return [r.top, r.bottom, r.left, r.right]; }")


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def test_a_live_change_shows_on_the_stage_and_an_empty_prompt_keeps_it(server: str, browser) -> None:
    """Lecture mode at 1280x720: chips in the status line name K, the temperature, the proposer and the
    layout, and follow K changed in the sidebar; a new prompt's toast opens clear of the status line
    and the narrative; an emptied prompt keeps the stage on its run and says so beside the prompt."""
    errors: list[str] = []
    page = _lecture_page(browser, server, 1280, 720, errors)
    chips = page.evaluate(CHIPS_JS)
    assert len(chips) == 4 and chips[0] == "K = 5" and chips[-1] == "chain", chips
    _sidebar(page, True)
    thumb = page.locator(".st-key-k input[type='range']")  # the slider's thumb takes the keys
    thumb.focus()
    _rerun(page, lambda: thumb.press("ArrowLeft"))
    page.wait_for_function(f"() => ({CHIPS_JS})()[0] === 'K = 4'", timeout=60_000, polling=100)

    run = page.evaluate("window.__specvizStage.state.run")
    prompt = page.locator("textarea[aria-label='Prompt']")
    prompt.fill(NEW_PROMPT)
    prompt.press("Control+Enter")
    page.wait_for_function(f"() => window.__specvizStage.state.run !== {run}", timeout=300_000, polling=100)
    page.wait_for_selector("[data-testid='stToast']", timeout=60_000)
    _sidebar(page, False)
    toast, side = page.evaluate(BOX_JS, "[data-testid='stToast']"), page.evaluate(BOX_JS, ".svs .svs-side")
    assert not _overlap(toast, side), (toast, side)
    assert toast[1] <= 720.5 and toast[0] >= 0, toast

    _sidebar(page, True)
    run = page.evaluate("window.__specvizStage.state.run")
    prompt.fill("")
    _rerun(page, lambda: prompt.press("Control+Enter"))
    said = page.locator("section[data-testid='stSidebar'] [data-testid='stAlert']").filter(has_text="prompt is empty")
    assert said.is_visible()
    assert page.evaluate("window.__specvizStage.state.run") == run and page.locator(".svs .svkv").count() >= 1
    assert page.locator("[data-testid='stMain'] [data-testid='stAlert']").count() == 0
    page.close()
    assert not errors, errors


def test_a_student_alone_at_1366x768_clicks_and_reads_the_same_stage(server: str, browser) -> None:
    """The normal layout at 1366x768 (lecture mode off): every stage button hit-tested at its centre and
    Next phase clicked by the mouse; the narrative and the status line at their boxes' sizes (Streamlit's
    `p` rule does not win there either); the chips in the status line; the lecture heading left out."""
    errors: list[str] = []
    page = _app_page(server, browser, errors)
    _fixed_k(page)
    for key in BUTTONS:
        sel = f".st-key-{key} button"
        box = page.locator(sel).first.bounding_box()
        hit = page.evaluate(HIT_JS, [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, sel])
        assert hit["inside"], (key, hit)
    start = page.evaluate("window.__specvizStage.state.cur")
    _step(page, start + 1)
    sizes = page.evaluate("""() => { const px = e => parseFloat(getComputedStyle(e).fontSize);
      const story = document.querySelector('.svs .svs-story'), status = document.querySelector('.svs .svs-status');
      return {story: px(story), storyP: Math.min(...[...story.querySelectorAll('p')].map(px)),
              status: px(status), statusP: px(status.querySelector('p')),
              heading: getComputedStyle(document.querySelector('.svs [data-role=phase]')).display}; }""")
    assert sizes["storyP"] == sizes["story"] and sizes["statusP"] == sizes["status"], sizes
    assert sizes["heading"] == "none", sizes
    chips = page.evaluate(CHIPS_JS)
    assert len(chips) == 4 and chips[0] == "K = 5", chips
    page.close()
    assert not errors, errors
