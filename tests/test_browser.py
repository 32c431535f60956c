"""The served app in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright).

One `streamlit run app.py` with the tiny random pair (module fixture) serves every test here; each
test opens its own page, so its own session. What is checked:

* **Lecture layout** (1920x1080, then 1440x900): after the first Next phase the KV picture (`.svkv`)
  spans ≥ 90 % of the main column's content width, its top is above the fold, its cell text is
  ≥ 14 px, and one physical block is one row (its cells in reading order, wrapping to more lines
  when they do not fit; rows are stacked).
  Lecture mode on enlarges the type (≥ 18 px) and keeps the picture above the fold.
* **Animation**: a sampler in the page (requestAnimationFrame) watches the new picture after a click:
  running CSS animations inside `.svkv` (`getAnimations`) and the computed style of one animated
  cell; an intermediate frame (progress strictly between 0 and 1, a colour or opacity strictly
  between the start and end values) must be drawn. The cell's transitions are held at fixed points
  of their course for that (which frames a loaded machine happens to draw is chance). Back changes
  the picture too.
* **Colour blindness**: a screenshot of the picture at a step that shows committed, provisional
  and stale slots is simulated for deuteranopia and protanopia (tests/cvd.py); the slot colours
  sampled at those cells stay ≥ 20 ΔE76 apart (cvd's bar) in both simulations.
* **Click-through**: every phase of two cycles, Play/Pause, the Export tab's downloads; the run file
  downloaded there is opened through the sidebar's uploader in a fresh session and stepped through
  as an imported run (no model).
* **Gallery**: a scenario loads from its button (the default pair, loaded by the same server) and
  the status line shows the scenario's cycle.

Every test collects `pageerror`s and checks that no exception box appears. Screenshots (and the
simulated colour-blind renderings) go to test-artifacts/browser/ (gitignored).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

# One launch recipe (Chromium flags, `streamlit run` on a free port) for the browser test and the load bench.
from bench.load import CHROMIUM, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
OUT = ARTIFACTS / "browser"
EXCEPTION = "[data-testid='stException']"
STATUS = "[data-testid='stStatusWidget']"
ROUTE = "/api/specviz/stage"  # the stage's own route (specviz.ui.stage_route.PATH)
STATUS_LINE = "committed before this cycle"  # words of the stage's status line (narrative.status_markdown)
MIN_DELTA_E = 20.0  # tests/cvd.py: "ΔE ≥ 20 is a difference one names" — the palette's bar
SLOT_STATES = ("committed", "provisional", "stale")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium is not installed"),
]

# In the page: remember the picture's cache cells (the nodes), then, once armed (window.__svGo), sample
# every animation frame for `ms` milliseconds after the stage's title changes: the running CSS
# transitions and Web Animations inside the stage (`getAnimations`), and the computed background of
# the first cell whose state class changed. window.__svSamples gets the result, with whether every
# remembered cell node is still in the page (the picture is patched in place, not replaced).
SAMPLER_JS = """([ms, timeoutMs]) => {
  window.__svSamples = null;
  const root = document.querySelector('.svs');
  const title0 = root.dataset.title;
  const cells = [...root.querySelectorAll('.svkv-cache .svkv-cell[data-key]')];
  const classes = new Map(cells.map(c => [c, c.className]));
  const samples = [];
  let started = null, cell = null, t0 = null, probed = false, probeError = null;
  window.__svGo = () => {
    t0 = performance.now();
    function tick() {
      const now = performance.now();
      if (root.dataset.title !== title0) {
        if (started === null) started = now;
        if (!cell) cell = cells.find(c => c.isConnected && c.className !== classes.get(c)) || null;
        const running = root.getAnimations({subtree: true}).filter(a => a.playState === 'running');
        // The cell's own animations and its cross-fade layer's (::before: the old colour, fading out).
        const mine = cell ? running.filter(a => a.effect && a.effect.target === cell) : [];
        const sample = t => {
          const cs = cell ? getComputedStyle(cell) : null;
          const layer = cell ? getComputedStyle(cell, '::before') : null;
          samples.push({t, running: running.length,
            kinds: [...new Set(running.map(a => a.constructor.name))],
            progress: mine.length ? mine[0].effect.getComputedTiming().progress : null,
            bg: cs && cs.backgroundColor, cls: cell && cell.className,
            was: layer && layer.content !== 'none' ? layer.backgroundColor : null,
            wasOpacity: layer && layer.content !== 'none' ? parseFloat(layer.opacity) : null});
        };
        if (!probed && mine.length) {
          // Which frames a loaded machine draws is chance: the cell's transitions are held at 0, 1/4,
          // 1/2 and 3/4 of their course (the styles a frame then would paint), then run on from where
          // they were.
          probed = true;
          const at = mine.map(a => a.currentTime);
          try {
            for (const f of [0, 0.25, 0.5, 0.75]) {
              mine.forEach(a => { a.pause(); a.currentTime = f * a.effect.getComputedTiming().duration; });
              sample(now - started);
            }
          } catch (e) {
            probeError = String(e);  // said in the result, never a dead sampling loop
          } finally {  // however a seek went, the transitions run on from where they were
            mine.forEach((a, i) => { if (at[i] !== null) a.currentTime = at[i]; a.play(); });
          }
        }
        sample(now - started);
        if (now - started > ms) {
          const kept = cells.filter(c => c.isConnected).length;
          // A key still drawn must be drawn by the same node: nothing replaced, only patched or moved.
          const replaced = cells.filter(c => { const now = root.querySelector(`[data-key="${c.dataset.key}"]`);
            return now && now !== c; }).length;
          window.__svSamples = {samples, from: title0, to: root.dataset.title, waitedMs: started - t0,
            cells: cells.length, kept, replaced, key: cell && cell.dataset.key, probeError};
          return;
        }
      }
      if (now - t0 > timeoutMs) { window.__svSamples = {samples, from: title0, timedOut: true}; return; }
      requestAnimationFrame(tick);
    }
    requestAnimationFrame(tick);
  };
}"""

# Geometry of the stage, its picture and the main column's content box (CSS px, viewport coordinates).
LAYOUT_JS = """() => {
  const stage = document.querySelector('.svs');
  const kv = stage.querySelector('.svkv');
  const main = document.querySelector("[data-testid='stMainBlockContainer']");
  const cs = getComputedStyle(main);
  const r = kv.getBoundingClientRect();
  const grids = [...kv.querySelectorAll('.svkv-grid')].map(g => [...g.querySelectorAll('.svkv-row')].map(
    row => [...row.querySelectorAll('.svkv-cell')].map(c => { const b = c.getBoundingClientRect();
      return [b.top, b.bottom, b.left]; })));
  const tok = kv.querySelector('.svkv-cache .svkv-cell .svkv-tok');
  return {left: r.left, top: r.top, width: r.width, stageWidth: stage.getBoundingClientRect().width,
    mainWidth: main.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight),
    grids, cellFontPx: parseFloat(getComputedStyle(tok).fontSize), lecture: kv.classList.contains('svkv-lecture')};
}"""

# One screen: where the phase's hooks lie (CSS px, viewport coordinates) and the narrative's size.
HOOKS_JS = """() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
  const stage = document.querySelector('.svs');
  const story = stage.querySelector('[data-role=narrative]');
  const fig = stage.querySelector('[role=figure]');
  return {title: stage.dataset.title, label: fig.getAttribute('aria-label'), vw: innerWidth, vh: innerHeight,
    verdicts: [...stage.querySelectorAll('[data-role=verdict]')].map(box),
    actions: [...stage.querySelectorAll('[data-role=action]')].map(box),
    narrative: box(story), narrativePx: parseFloat(getComputedStyle(story).fontSize)};
}"""


def _open(browser, url: str, errors: list[str], width: int = 1920, height: int = 1080):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(120_000)  # the machine may be busy with other jobs
    _watch_errors(page, errors, url)
    page.goto(url, wait_until="domcontentloaded")
    _button(page, "next_phase").wait_for(timeout=90_000)
    _wait_idle(page)
    return page


def _watch_errors(page, errors: list[str], own: str) -> None:
    """Page errors and console errors; a resource of another host failing is not ours (offline)."""
    page.on("pageerror", lambda e: errors.append(str(e)))

    def console(msg) -> None:
        where = (msg.location or {}).get("url", "")
        if msg.type == "error" and not (msg.text.startswith("Failed to load resource") and not where.startswith(own)):
            errors.append(f"console: {msg.text} ({where})")

    page.on("console", console)


def _wait_prefetched(page, timeout_ms: int = 120_000) -> None:
    """Until the stage holds the next cycle (the one after the cycle shown), and waits for nothing."""
    page.wait_for_function(
        "() => { const s = window.__specvizStage && window.__specvizStage.state; if (!s || !s.data) return false;"
        " const end = s.cur === 0 ? 0 : Math.ceil(s.cur / 5) * 5;"
        " return !!s.data.steps[String(end + 1)] && !s.waiting; }",
        timeout=timeout_ms,
    )


def _button(page, key: str):
    """A keyed Streamlit button (its container carries the class `st-key-<key>`)."""
    return page.locator(f".st-key-{key} button").first  # Streamlit draws a second one for the shortcut


def _wait_idle(page, timeout_ms: int = 120_000) -> None:
    """Wait until Streamlit has finished the current script run and the stage's motion ended — twice:
    the stage reports a step to the server once its motion has run (0.7 s), and that run may patch
    the picture again (a new layout, a prefetched cycle)."""
    for settle in (300, 900):
        page.wait_for_timeout(settle)
        page.wait_for_selector(STATUS, state="detached", timeout=timeout_ms)
        page.wait_for_function(
            "() => { const s = document.querySelector('.svs') || document.querySelector('.svkv');"
            " return !s || s.getAnimations({subtree: true}).every(a => a.playState !== 'running'); }",
            timeout=timeout_ms,
        )
    page.wait_for_timeout(200)


def _no_exception(page, where: str) -> None:
    boxes = page.locator(EXCEPTION)
    assert boxes.count() == 0, f"exception box at {where}: {boxes.first.inner_text()}"


def _status(page) -> str:
    """The stage's status line (drawn by the stage component)."""
    return page.locator(".svs .svs-status").first.inner_text()


def _phase_title(page) -> str:
    return page.evaluate("document.querySelector('.svs').dataset.title")


def _stage(page) -> dict:
    """The stage component's own state: the step shown, the server's sequence, a pending request."""
    return page.evaluate(
        "() => { const s = window.__specvizStage.state; return {cur: s.cur, seq: s.seq, waiting: s.waiting,"
        " steps: Object.keys(s.data.steps).map(Number), queue: s.queue.length}; }"
    )


def _sampled(page, act, ms: int = 900) -> dict:
    """Do `act()` (a click or a key) and return what the in-page sampler saw (SAMPLER_JS)."""
    page.evaluate(SAMPLER_JS, [ms, 90_000])
    page.evaluate("window.__svGo()")
    act()
    page.wait_for_function("window.__svSamples !== null", timeout=100_000)
    return page.evaluate("window.__svSamples")


def _click_sampled(page, key: str, ms: int = 900) -> dict:
    return _sampled(page, lambda: _button(page, key).click(), ms)


def _rgb(css: str) -> tuple[float, ...]:
    inside = css[css.index("(") + 1 : css.index(")")]
    return tuple(float(x) for x in inside.split(",")[:3])


def _strictly_between(x: tuple[float, ...], a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """x lies on the way from a to b: every channel within [min, max], and x is neither end."""
    within = all(min(p, q) - 1 <= v <= max(p, q) + 1 for v, p, q in zip(x, a, b))
    return within and x != a and x != b


def _painted(sample: dict) -> tuple[float, ...]:
    """The colour on screen: the cell's background under its cross-fade layer (the old colour at
    the layer's opacity, stage.css `.svs-fade`), or the background alone."""
    bg = _rgb(sample["bg"])
    if not sample.get("was") or sample.get("wasOpacity") is None:
        return bg
    a = sample["wasOpacity"]
    return tuple(a * w + (1 - a) * b for w, b in zip(_rgb(sample["was"]), bg))


def _assert_animated(seen: dict, end_bg: str) -> None:
    """The click changed the step on the same nodes, and a transition was caught between its ends."""
    samples = seen["samples"]
    assert not seen.get("timedOut"), f"no new step appeared: {seen}"
    assert not seen.get("probeError"), f"holding the transitions failed: {seen['probeError']}"
    assert seen["cells"] and seen["kept"] > 0 and seen["replaced"] == 0, (
        f"cache cells were replaced, not patched: {seen['replaced']} of {seen['cells']}, {seen['kept']} kept")
    assert samples and samples[0]["running"] > 0, f"nothing animated on the step: {samples[:2]}"
    kinds = set().union(*(s["kinds"] for s in samples))
    assert "CSSTransition" in kinds, kinds
    start = samples[0]
    mid = [s for s in samples if s["progress"] is not None and 0 < s["progress"] < 1]
    assert mid, f"no intermediate frame of the cell's transition was rendered: {samples}"
    a, b = _painted(start), _rgb(end_bg)
    assert a != b and any(_strictly_between(_painted(s), a, b) for s in mid), (
        f"no in-between colour seen (start {start}, end {end_bg}): {mid}")


def _assert_layout(page, fold: int, min_font: float) -> dict:
    g = page.evaluate(LAYOUT_JS)
    # The stage spans the main column; the picture most of it (the narrative sits beside it).
    assert g["stageWidth"] >= 0.9 * g["mainWidth"] and g["width"] >= 0.6 * g["mainWidth"], g
    assert g["top"] < fold, f"the KV picture starts below the fold: top {g['top']:.0f} >= {fold}"
    assert g["cellFontPx"] >= min_font, g["cellFontPx"]
    assert g["grids"], "no cache grid"
    for grid in g["grids"]:
        assert grid, "a cache grid without rows"
        last_bottom = float("-inf")
        for row in grid:  # one physical block: its cells in reading order, wrapping to more lines if need be
            assert row, "a row without cells"
            for (top, bottom, left), (top2, _, left2) in zip(row, row[1:]):
                same_line = abs(top2 - top) <= 1 and left2 > left
                assert same_line or top2 >= bottom - 1, f"the cells of one block are out of order: {row}"
            assert min(c[0] for c in row) >= last_bottom - 1, f"blocks are not stacked: {grid}"
            last_bottom = max(c[1] for c in row)
    return g


# ---------------------------------------------------------------- layout, animation, colour -----


def test_lecture_layout_animation_and_colour_blindness(server: str, browser) -> None:
    import cvd

    from specviz.viz.style import SLOT_COLORS

    errors: list[str] = []
    page = _open(browser, server, errors)
    page.screenshot(path=str(OUT / "1920-00-prefill.png"))
    _wait_prefetched(page)
    # Next phase: answered in the browser (no request), the cells kept (patched in place or moved).
    seq = _stage(page)["seq"]
    seen = _click_sampled(page, "next_phase")
    _wait_idle(page)
    _no_exception(page, "the first Next phase")
    assert "Draft" in seen["to"], seen["to"]
    assert _stage(page)["seq"] == seq and seen["waitedMs"] < 1000, (seen["waitedMs"], _stage(page))
    assert seen["replaced"] == 0 and seen["kept"] > 0, {k: v for k, v in seen.items() if k != "samples"}
    # The rollback turns provisional slots committed or stale on the nodes that showed them: a
    # transition, caught between its two colours. (Verify and the draft fill new blocks here: the
    # tiny pair's pages are 4 slots.)
    for _ in range(3):
        _button(page, "next_phase").click()
    page.wait_for_function("() => window.__specvizStage.state.cur === 4")
    _wait_idle(page)
    seen = _click_sampled(page, "next_phase")
    _wait_idle(page)
    assert "Rollback" in seen["to"] and seen["key"], {k: v for k, v in seen.items() if k != "samples"}
    end = page.evaluate(f"() => getComputedStyle(document.querySelector('.svs [data-key=\"{seen['key']}\"]'))"
                        ".backgroundColor")
    _assert_animated(seen, end)
    # Lecture layout at 1920x1080, after the first click.
    _assert_layout(page, fold=1080, min_font=14)
    page.screenshot(path=str(OUT / "1920-01-draft.png"))
    page.screenshot(path=str(OUT / "1920-01-draft-full.png"), full_page=True)

    # Back changes the step (the same nodes again).
    seen = _click_sampled(page, "back", ms=300)
    _wait_idle(page)
    assert not seen.get("timedOut") and seen["to"] != seen["from"] and seen["replaced"] == 0, seen
    assert "Rollback" not in _phase_title(page)
    _no_exception(page, "Back")

    # Colour blindness: step on until one picture holds committed, provisional and stale slots.
    found = False
    for _ in range(16):
        _button(page, "next_phase").click()
        _wait_idle(page)
        _no_exception(page, _phase_title(page))
        counts = {s: page.locator(f".svkv-grid .svkv-cell.svkv-s-{s}").count() for s in SLOT_STATES}
        if all(counts.values()):
            found = True
            break
    assert found, f"no step with committed, provisional and stale slots in 16 phases: {counts}"
    _check_colour_blind_rendering(page, cvd, SLOT_COLORS)
    page.set_viewport_size({"width": 1920, "height": 1080})

    # Lecture mode on: bigger type, picture still above the fold.
    page.get_by_text("Lecture mode").first.click()
    page.wait_for_selector(".svkv.svkv-lecture", timeout=60_000)
    _wait_idle(page)
    _no_exception(page, "lecture mode")
    _assert_layout(page, fold=1080, min_font=18)
    page.screenshot(path=str(OUT / "1920-lecture.png"))
    page.close()

    # 1440x900 (a laptop on a projector): the picture's top is above the fold after the first click.
    page = _open(browser, server, errors, 1440, 900)
    _button(page, "next_phase").click()
    _wait_idle(page)
    _no_exception(page, "the first Next phase at 1440x900")
    g = _assert_layout(page, fold=900, min_font=14)
    assert g["top"] < 900
    page.screenshot(path=str(OUT / "1440-01-draft.png"))
    page.close()
    assert not errors, errors


def _check_colour_blind_rendering(page, cvd, slot_colors: dict[str, str]) -> None:
    """Screenshot the picture, save its deuteranopia/protanopia simulations next to it, and check the
    slot colours sampled at known cells: right as drawn, and ≥ MIN_DELTA_E apart when simulated."""
    kv = page.locator(".svkv").first
    shot = OUT / "kv-normal.png"
    # Streamlit's main column scrolls inside the page: a viewport taller than the picture lets the
    # screenshot hold all of it.
    page.set_viewport_size({"width": 1920, "height": 3000})
    page.wait_for_timeout(500)
    kv.screenshot(path=str(shot), animations="disabled")
    pixels = cvd.read_png(shot)[..., :3]
    # Known cells: the first cache cell in each state, as boxes relative to the picture.
    boxes = page.evaluate(
        """(states) => { const kv = document.querySelector('.svkv').getBoundingClientRect();
        return Object.fromEntries(states.map(s => { const r = document.querySelector(
          '.svkv-grid .svkv-cell.svkv-s-' + s).getBoundingClientRect();
          return [s, [r.left - kv.left, r.top - kv.top, r.width, r.height]]; })); }""",
        list(SLOT_STATES),
    )
    scale = pixels.shape[1] / kv.bounding_box()["width"]  # 1 unless the device scale factor is not

    def fill(img: np.ndarray, state: str) -> str:
        """The cell's fill: the commonest colour of a strip along its bottom-left, clear of the text
        (stripes and hatching leave the plain fill the most frequent colour)."""
        x, y, w, h = (v * scale for v in boxes[state])
        patch = img[int(y + h - 9 * scale) : int(y + h - 4 * scale), int(x + 5 * scale) : int(x + w * 0.3)]
        colours, counts = np.unique(patch.reshape(-1, 3), axis=0, return_counts=True)
        return cvd.rgb_to_hex(colours[counts.argmax()] / 255.0)

    drawn = {s: fill(pixels, s) for s in SLOT_STATES}
    for s, colour in drawn.items():
        assert cvd.delta_e(colour, slot_colors[s]) < 6, f"{s} cell sampled {colour}, palette {slot_colors[s]}"
    report = {"drawn": drawn}
    for deficiency in cvd.DEFICIENCIES:
        simulated = cvd.simulate_image(pixels, deficiency)
        cvd.write_png(OUT / f"kv-{deficiency}.png", simulated)
        seen = {s: fill(simulated, s) for s in SLOT_STATES}
        report[deficiency] = seen
        for i, a in enumerate(SLOT_STATES):
            for b in SLOT_STATES[i + 1 :]:
                de = cvd.delta_e(seen[a], seen[b])
                assert de >= MIN_DELTA_E, f"{deficiency}: {a} {seen[a]} vs {b} {seen[b]}: ΔE {de:.1f}"
    (OUT / "kv-colours.json").write_text(json.dumps(report, indent=1) + "\n")


# ---------------------------------------------------------------- the stage in the browser ------


# Whether the history slider on the page was drawn for `step` (its key: history-run-view-seq).
HISTORY_AT_JS = """(step) => [...document.querySelectorAll("[class*='st-key-history-']")].some(el =>
  [...el.classList].some(c => c.startsWith('st-key-history-') && c.split('-')[4] === String(step)))"""


def _route_messages(page) -> list[dict]:
    """The messages the stage posts to its route (specviz.ui.stage_route), as they leave."""
    sent: list[dict] = []

    def seen(request) -> None:
        if request.url.endswith(ROUTE) and request.method == "POST":
            sent.append(json.loads(request.post_data)["event"])

    page.on("request", seen)
    return sent


def test_keyboard_prefetch_and_queued_clicks(server: str, browser) -> None:
    """→ / Shift+→ / ← step locally; Next cycle on a prefetched cycle asks the server nothing; a burst
    of clicks past what the browser has is queued and every click is carried out."""
    errors: list[str] = []
    page = _open(browser, server, errors)
    routed = _route_messages(page)
    # Someone alone gets a short guided start at the top of the stage, until they dismiss it.
    intro = page.locator(".svs .svs-intro")
    assert intro.is_visible() and "Next phase" in intro.inner_text() and intro.bounding_box()["y"] < 400
    page.get_by_role("button", name="Got it — hide this").click()
    assert intro.is_hidden()
    _wait_prefetched(page)
    seq = _stage(page)["seq"]
    for want in range(1, 6):
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => window.__specvizStage.state.cur === {want}", timeout=5_000)
    assert "Rollback" in _phase_title(page) and _stage(page)["seq"] == seq
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("() => window.__specvizStage.state.cur === 4", timeout=5_000)
    page.keyboard.press("ArrowRight")
    # Stepping pauses: the server hears where the browser is and draws the page around the stage
    # again, so the history slider (outside the stage's fragment; its key names the step it was
    # drawn for, `stage.history_slider`) reaches the step on screen. The server itself did not move.
    page.wait_for_function(HISTORY_AT_JS, arg=5, timeout=60_000)
    assert _stage(page)["seq"] == seq and _stage(page)["cur"] == 5
    # Next cycle on a prefetched cycle: local, painted at once.
    _wait_prefetched(page)
    # The page keeps the last 40 payloads' stamps: read the kinds now, before a burst's reports (and, on
    # a loaded machine, their resends) push the prefetches out.
    kinds = {t["kind"] for t in page.evaluate("() => window.__specvizStage.state.timings")}
    seen = _sampled(page, lambda: page.keyboard.press("Shift+ArrowRight"), ms=200)
    assert seen["to"].startswith("Cycle 2 · 5") and _stage(page)["seq"] == seq, (seen["to"], _stage(page))
    # (How fast is the latency bench's business; here: painted without waiting for any server run.)
    assert seen["waitedMs"] < 1000 and seen["replaced"] == 0, {k: v for k, v in seen.items() if k != "samples"}
    _wait_idle(page)
    # A burst of 12 clicks: the browser has the rest of cycle 3 at most; the others wait, none is lost.
    start = _stage(page)["cur"]
    for _ in range(12):
        _button(page, "next_phase").click(delay=0, no_wait_after=True)
    try:
        page.wait_for_function(f"() => window.__specvizStage.state.cur === {start + 12}", timeout=180_000)
    except Exception:
        state = page.evaluate("() => { const s = window.__specvizStage.state; return {cur: s.cur, seq: s.seq,"
                              " waiting: s.waiting, queue: s.queue, pending: s.pending, answered: s.data.answered,"
                              " view: s.data.view, more: s.data.more, steps: Object.keys(s.data.steps),"
                              " notice: document.querySelector('.svs-notice').textContent, log: s.log}; }")
        raise AssertionError(f"the burst stopped at {state} (started at {start})") from None
    _wait_idle(page)
    _no_exception(page, "a burst of clicks")
    assert _stage(page)["queue"] == 0 and not _stage(page)["waiting"]
    # The reports went to the stage's own route (no script run); so do a step asked for and a
    # prefetch (the next test sees them when the route fails).
    assert "view" in {m["kind"] for m in routed} and all("pause" not in m for m in routed), routed
    # A payload that follows an event carries the server's stamps (what the latency bench splits a
    # round trip by), in order: the event, its callback, the payload, its arrival here.
    stamps = page.evaluate("() => window.__specvizStage.state.timings")
    assert kinds | {t["kind"] for t in stamps} >= {"prefetch", "view"}, (kinds, stamps)
    for t in stamps:  # one machine, one clock (a few ms of slack: the browser's and Python's rounding)
        assert t["event_at"] + t["callback_ms"] <= t["built_at"] + 2 <= t["arrived"] + 4 <= t["done"] + 6, t
    page.screenshot(path=str(OUT / "50-after-burst.png"))
    # A step's body travels once: the payloads after the first bring only the bodies the browser lacked.
    _wait_prefetched(page)
    got = page.evaluate("() => window.__specvizStage.state.received")
    assert got["payloads"] > 4 and 0 < got["bodies"] < got["steps"], got
    # A browser that lost its bodies (a remounted stage starts empty) lacks those steps: the next one
    # is asked for like any step it lacks, and the answer brings it.
    at = _stage(page)["cur"]
    page.evaluate("() => { const s = window.__specvizStage.state; s.bodies.clear();"
                  " return window.__specvizStage.update(Object.assign({}, s.raw, {bodies: ''})); }")
    assert _stage(page)["steps"] == []
    _button(page, "next_phase").click()
    page.wait_for_function(f"() => window.__specvizStage.state.cur === {at + 1}", timeout=120_000)
    _wait_idle(page)
    _no_exception(page, "a step asked for again")
    assert str(at + 1) in map(str, _stage(page)["steps"]) and not _stage(page)["waiting"]
    page.reload()  # remembered in this browser
    page.wait_for_function("() => !!window.__specvizStage", timeout=120_000)
    assert page.locator(".svs .svs-intro").is_hidden()
    page.close()
    assert not errors, errors


def test_the_page_answers_when_the_route_fails(server: str, browser) -> None:
    """A route that fails (here: every call answered 500, as by a proxy that does not pass it) costs
    nothing but time: each message goes to the page's trigger instead, and cycles past what the
    browser holds still come."""
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1920, "height": 1080})
    page.set_default_timeout(120_000)
    failed: list[str] = []

    def fail(route) -> None:
        failed.append(json.loads(route.request.post_data)["event"]["kind"])
        route.fulfill(status=500, body="{}", content_type="application/json")

    page.route("**" + ROUTE, fail)
    _watch_errors(page, errors, server)
    page.goto(server, wait_until="domcontentloaded")
    _button(page, "next_phase").wait_for(timeout=90_000)
    _wait_idle(page)
    _wait_prefetched(page)
    for cycle in range(1, 9):  # Next cycle in a row, until one lands past what was computed ahead
        page.keyboard.press("Shift+ArrowRight")
        page.wait_for_function(f"() => window.__specvizStage.state.cur === {5 * cycle}", timeout=120_000)
        if "next_cycle" in failed:
            break
    _wait_idle(page)
    _no_exception(page, "the route failing")
    assert "next_cycle" in failed, failed  # asked, and answered by the page
    assert not _stage(page)["waiting"] and f"Cycle {cycle} · 5" in _phase_title(page)
    page.close()
    # The browser logs each failed call; nothing else went wrong.
    assert not [e for e in errors if "status of 500" not in e], errors


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 720)])
def test_one_screen_in_lecture_mode(server: str, browser, size: tuple[int, int]) -> None:
    """After every phase of three cycles: each draft's verdict, the narrative (≥ 20 px, 18 px at 720 px) and the rows
    the phase changed are inside the viewport; the figure's label names the cycle and the phase."""
    errors: list[str] = []
    width, height = size
    page = _open(browser, server, errors, width, height)
    page.get_by_text("Lecture mode").first.click()
    page.wait_for_selector(".svs .svkv.svkv-lecture", timeout=60_000)
    _wait_idle(page)
    for step in range(1, 16):
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => window.__specvizStage.state.cur === {step} && "
                               "!window.__specvizStage.state.waiting", timeout=120_000)
        page.wait_for_timeout(600)  # the motion settles
        g = page.evaluate(HOOKS_JS)
        cycle, phase = g["title"].split(" · ", 1)
        assert cycle in g["label"] and phase.split(" · ")[-1] in g["label"].replace("&amp;", "&"), g
        assert g["narrativePx"] >= (20 if height >= 1000 else 18), g  # the type follows the screen's height
        for name in ("verdicts", "actions"):
            for top, bottom, _left, right in g[name]:
                assert top >= 0 and bottom <= g["vh"] + 0.5 and right <= g["vw"], (g["title"], name, g[name])
        top, bottom, _, right = g["narrative"]
        assert top >= 0 and bottom <= g["vh"] + 0.5 and right <= g["vw"], (g["title"], "narrative", g["narrative"])
        if phase.startswith(("3", "5")):
            page.screenshot(path=str(OUT / f"lecture-{width}x{height}-{step:02d}.png"))
    _no_exception(page, "lecture mode")
    page.close()
    assert not errors, errors


def test_compare_puts_the_two_pictures_in_columns(server: str, browser) -> None:
    errors: list[str] = []
    page = _open(browser, server, errors, 1920, 1080)
    page.get_by_text("Compare cache layouts").first.click()
    page.get_by_text("Compare side by side").first.click()
    _wait_idle(page)
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelectorAll('.svs .svs-pic .svkv').length === 2", timeout=120_000)
    _wait_idle(page)
    a, b = page.evaluate("() => [...document.querySelectorAll('.svs .svs-pic')].map(e => {"
                         " const r = e.getBoundingClientRect(); return [r.top, r.left, r.right]; })")
    assert abs(a[0] - b[0]) < 2 and b[1] >= a[2] - 1, (a, b)  # side by side, not stacked
    page.screenshot(path=str(OUT / "70-compare.png"))
    # At 1440 px each picture has a ~480 px column: the cells wrap, nothing in them is cut.
    page.set_viewport_size({"width": 1440, "height": 900})
    _wait_idle(page)
    cut = page.evaluate("() => [...document.querySelectorAll('.svs .svs-pic .svkv-cell, .svs .svs-pic .svkv-meta,"
                        " .svs .svs-pic .svkv-tok')].filter(e => e.scrollWidth > e.clientWidth + 1)"
                        ".map(e => e.textContent).slice(0, 8)")
    widths = page.evaluate("() => [...document.querySelectorAll('.svs .svs-pic')].map(e => e.clientWidth)")
    assert not cut and len(widths) == 2, (cut, widths)
    page.screenshot(path=str(OUT / "71-compare-1440.png"))
    page.close()
    assert not errors, errors


def test_the_standalone_page_steps_with_the_same_code(browser, tmp_path) -> None:
    import specviz
    from specviz.ui.runs import record_of
    from specviz.ui.state import advance_cycle, start_live_run
    from specviz.viz import stage_js
    from specviz.viz.standalone import run_html

    pair = specviz.build_tiny_pair(seed=0)
    run = start_live_run(1, "page", (), pair, specviz.DecodeConfig(k=3, page_size=4, seed=1),
                         pair.tokenizer.encode("Hello there, world"))
    for _ in range(2):
        run = advance_cycle(run)
    html = run_html(record_of(run))
    assert stage_js.core_js().replace("</script", "<\\/script") in html  # the app's stage script, verbatim
    path = tmp_path / "run.html"
    path.write_text(html)
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    _watch_errors(page, errors, "file://")
    page.goto(path.as_uri())
    page.wait_for_function("() => window.__specvizStage && window.__specvizStage.state.cur === 0")
    assert page.locator("section.step").first.is_hidden()  # the no-script sections, hidden by the script
    seen = _sampled(page, lambda: page.keyboard.press("ArrowRight"), ms=300)
    assert seen["to"] == "cycle 1 · draft" and page.inner_text("#counter").startswith("step 2 of 11")
    seen = _sampled(page, lambda: page.click("#next"), ms=300)
    assert seen["to"] == "cycle 1 · verify" and seen["replaced"] == 0 and seen["kept"] > 0, seen
    page.keyboard.press("Shift+ArrowRight")
    page.wait_for_function("() => window.__specvizStage.state.cur === 5")
    # The generated-text strip, as in the app (it was dropped here): the cycle's committed tokens in it.
    strips = page.evaluate("[document.querySelector('.svs-strip').innerHTML,"
                           " document.querySelectorAll('section.step .strip')[5].innerHTML]")
    assert strips[0] == strips[1] and "Hello" in page.locator(".svs-strip").inner_text()
    page.screenshot(path=str(OUT / "60-standalone.png"))
    page.close()
    assert not errors, errors
    # Without scripts the same page is the whole run, top to bottom.
    page = browser.new_page(java_script_enabled=False)
    page.goto(path.as_uri())
    assert page.locator("section.step").count() == 11 and page.locator("section.step").nth(3).is_visible()
    page.close()


# The stage core alone in a page, fed payloads by hand (as the Streamlit glue feeds them): what a
# waiting click does when the step it waits for comes in a payload other than its request's answer.
STAGE_CORE_JS = """() => {
  const root = document.createElement('div');
  document.body.appendChild(root);
  window.__sent = [];
  window.__stage = createStage(root, {send: m => window.__sent.push(m)});
}"""


def _payload(seq: int, steps: range, answered: str | None = None, status: str = "s", view: int | None = None) -> dict:
    def step(n: int) -> dict:
        cells = "".join(f"<span data-key='c{i}' class='svkv-cell'>{i}</span>" for i in range(n + 1))
        return {"title": f"step {n}", "cycle": max(0, (n - 1) // 5), "phase": "draft", "status": status,
                "story": f"<p>story {n}</p>", "strip": "", "kv": [f"<div class='svkv' data-key='pic'>{cells}</div>"]}

    return {"run": 1, "seq": seq, "view": steps[-1] if view is None else view, "answered": answered,
            "steps": {str(n): step(n) for n in steps},
            "more": True, "end": "", "follow": False, "lecture": False, "quiz": [], "prefetch": False, "intro": ""}


def test_a_waiting_click_takes_the_first_payload_that_brings_its_step(browser) -> None:
    from specviz.viz import stage_js

    errors: list[str] = []
    page = browser.new_page()
    _watch_errors(page, errors, "about:blank")
    page.set_content(f"<script>{stage_js.core_js()}</script>")
    page.evaluate(STAGE_CORE_JS)
    state = "() => { const s = window.__stage.state; return {cur: s.cur, seq: s.seq, waiting: s.waiting}; }"
    page.evaluate("d => window.__stage.update(d)", _payload(1, range(0, 6)))
    assert page.evaluate(state) == {"cur": 5, "seq": 1, "waiting": False}
    page.evaluate("() => window.__stage.next()")  # step 6 is not here: asked for
    asked = page.evaluate("() => window.__sent.filter(m => m.req).pop()")
    assert asked["target"] == 6 and page.evaluate(state)["waiting"]
    # A payload answering something else (the report that started computing the cycle) brings step 6.
    page.evaluate("d => window.__stage.update(d)", _payload(1, range(0, 11), view=5))
    assert page.evaluate(state) == {"cur": 6, "seq": 1, "waiting": False}
    cell = page.evaluate_handle("() => document.querySelector('[data-key=c3]')")
    page.evaluate("() => window.__stage.next()")  # step 7: local
    # The request's own answer comes late (the server now at step 6, a new sequence number): the
    # browser takes the number and stays where it went.
    page.evaluate("d => window.__stage.update(d)", _payload(2, range(0, 11), answered=asked["req"], view=6))
    assert page.evaluate(state) == {"cur": 7, "seq": 2, "waiting": False}
    # Only the shown step's status line changed: that line is patched, the picture's nodes untouched.
    page.evaluate("d => window.__stage.update(d)", _payload(2, range(0, 11), status="one more cycle", view=6))
    assert page.inner_text(".svs-status") == "one more cycle"
    assert page.evaluate("c => c.isConnected && c === document.querySelector('[data-key=c3]')", cell)
    page.close()
    assert not errors, errors


GLUE_JS = """async ([js, data]) => {
  const url = URL.createObjectURL(new Blob([js], {type: 'text/javascript'}));
  const mod = await import(url);
  const host = document.createElement('div');
  host.innerHTML = "<div class='st-key-next_phase'><button>Next phase</button></div>";
  document.body.appendChild(host);
  const parentElement = document.createElement('div');
  document.body.appendChild(parentElement);
  const call = d => mod.default({data: d, parentElement, setTriggerValue: () => {}});
  // Streamlit cleans up a call whose module import resolved after newer data had come, while the
  // element stays mounted, then makes the newer call.
  call(data)();
  window.__svGlue = {parentElement, latest: call(data)};
}"""
# After the page's button was clicked (by the mouse: answered by the stage).
GLUE_AFTER_JS = """async () => {
  const {parentElement, latest} = window.__svGlue;
  const alive = {stages: parentElement.querySelectorAll('.svs').length, cur: window.__specvizStage.state.cur};
  parentElement.remove();  // unmounted: now the cleanup takes it down
  latest();
  await new Promise(r => setTimeout(r, 20));
  return {alive, after: parentElement.querySelectorAll('.svs').length};
}"""


def test_the_component_survives_a_cleanup_while_mounted(browser) -> None:
    from specviz.viz import stage_js

    errors: list[str] = []
    page = browser.new_page()
    # A page of an origin of its own (about:blank has no cookies, which the glue may write).
    page.route("http://specviz.test/", lambda route: route.fulfill(content_type="text/html", body="<body></body>"))
    page.goto("http://specviz.test/")
    _watch_errors(page, errors, "http://specviz.test/")
    page.evaluate(GLUE_JS, [stage_js.app_js(), _payload(1, range(0, 6), view=4)])
    page.wait_for_function("() => !!document.querySelector('.svs') && window.__specvizStage.state.cur === 4")
    page.locator(".st-key-next_phase button").click()
    page.wait_for_function("() => window.__specvizStage.state.cur === 5", timeout=10_000)
    got = page.evaluate(GLUE_AFTER_JS)
    assert got == {"alive": {"stages": 1, "cur": 5}, "after": 0}, got
    page.close()
    assert not errors, errors


# ---------------------------------------------------------------- click-through, export, import -


def test_click_through_two_cycles_play_export_and_import(server: str, browser) -> None:
    errors: list[str] = []
    page = _open(browser, server, errors, 1500, 2600)
    page.screenshot(path=str(OUT / "10-prefill.png"), full_page=True)
    phases = ["draft", "verify", "accept", "resolve", "rollback"]
    for cycle in range(2):
        for i, phase in enumerate(phases):
            _button(page, "next_phase").click()
            _wait_idle(page)
            _no_exception(page, phase)
            assert f"cycle {cycle + 1} of" in _status(page), _status(page)
            page.screenshot(path=str(OUT / f"1{cycle + 1}-{i + 1}-{phase}.png"), full_page=True)
    # Below the stage, "More views" is closed (a click redraws nothing there); opened, its
    # Distributions tab draws the cycle's charts. The gallery lives in the sidebar.
    assert page.get_by_text("Scenario gallery").count() >= 1
    assert page.locator(".js-plotly-plot").count() == 0
    page.get_by_text("More views").click()
    page.get_by_role("tab", name="Distributions").wait_for(timeout=60_000)
    page.get_by_role("tab", name="Distributions").click()
    page.wait_for_selector(".js-plotly-plot", timeout=60_000)  # the tab is lazy: drawn after the click
    _wait_idle(page)
    charts = page.locator(".js-plotly-plot").count()
    assert charts >= 2
    # The open tabs (outside the stage's fragment) follow a step taken in the browser: the next
    # cycle's draft phase reveals fewer charts than the rollback phase before it.
    _button(page, "next_phase").click()
    page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot').length !== {charts}",
                           timeout=60_000)
    _wait_idle(page)
    _no_exception(page, "the tabs following a step")
    assert "phase 1" in _status(page) and page.locator(".js-plotly-plot").count() < charts, _status(page)
    before = _status(page)
    _button(page, "play").click()
    page.wait_for_timeout(3500)
    for _ in range(30):  # the timer advances a phase every second; allow for a busy machine
        if _status(page) != before:
            break
        page.wait_for_timeout(500)
    assert _status(page) != before, "Play did not advance"
    page.screenshot(path=str(OUT / "20-playing.png"), full_page=True)
    _button(page, "play").click()  # Pause
    _wait_idle(page)
    _no_exception(page, "pause")
    page.screenshot(path=str(OUT / "21-paused.png"), full_page=True)

    # Export: the downloads are produced on click.
    page.get_by_role("tab", name="Export").click()
    _wait_idle(page)
    with page.expect_download() as dl:
        _button(page, "dl_html").click()
    assert "Plotly" in Path(dl.value.path()).read_text()
    with page.expect_download() as dl:
        _button(page, "dl_json").click()
    run_file = OUT / "specviz-run.json"
    shutil.copy(dl.value.path(), run_file)
    recorded = json.loads(run_file.read_text())
    assert recorded.get("traces"), "the run file holds no cycles"
    page.close()

    # Replay: the run file opened in a fresh session through the sidebar's uploader, no model.
    page = _open(browser, server, errors)
    page.locator(".st-key-run_file input[type=file]").set_input_files(str(run_file))
    page.wait_for_function(
        "() => { const e = document.querySelector('.svs .svs-status');"
        " return !!e && e.innerText.includes('imported run'); }",
        timeout=60_000,
    )
    _wait_idle(page)
    _no_exception(page, "opening the run file")
    for i in range(7):
        _button(page, "next_phase").click()
        _wait_idle(page)
        _no_exception(page, f"imported run, step {i + 1}")
        assert "imported run (no model)" in _status(page), _status(page)
    assert "cycle 2 of" in _status(page), _status(page)
    page.screenshot(path=str(OUT / "30-imported.png"), full_page=True)
    page.close()
    assert not errors, errors


# ---------------------------------------------------------------- gallery (default pair) ---------


def test_gallery_scenario_loads(server: str, browser) -> None:
    """The gallery switches the sidebar to the default pair, which this server then loads (offline,
    ~10–30 s on a quiet machine), runs to the scenario's cycle and says so in the status line."""
    from specviz.scenarios import load_scenarios

    scenario = min(load_scenarios(), key=lambda s: s.cycle)  # the fewest cycles to compute
    errors: list[str] = []
    page = _open(browser, server, errors)
    _button(page, f"scenario_{scenario.id}").click()  # in the sidebar's gallery (open on a fresh page)
    notice = page.locator("[data-testid='stAlert']", has_text=f"Scenario {scenario.title}")
    idle_since = None
    for _ in range(600):  # the default pair loads in this server: up to a few minutes on a busy machine
        if notice.count():
            break
        running = page.locator(STATUS).count() > 0
        idle_since = None if running else (idle_since or 0) + 1
        # Nothing running and no scenario for 15 s: the click did not start one.
        assert idle_since is None or idle_since < 30, "the scenario's Load button started nothing"
        page.wait_for_timeout(500)
    _wait_idle(page, 300_000)
    _no_exception(page, "loading a scenario")
    assert f"cycle {scenario.cycle + 1} of" in _status(page), (_status(page), page.evaluate(
        "() => { const s = window.__specvizStage.state; return [s.cur, s.run, s.seq, s.data.view, s.data.run,"
        " Object.keys(s.data.steps), s.data.steps[String(s.cur)].title]; }"))
    checked = page.evaluate(
        "() => [...document.querySelectorAll(\"[data-testid='stSidebar'] input[type=radio]:checked\")]"
        ".map(e => e.closest('label').innerText)"
    )
    assert any(c.startswith("Default") for c in checked), f"the scenario ran without the default pair: {checked}"
    _button(page, "next_phase").click()
    _wait_idle(page, 300_000)
    _no_exception(page, "the scenario's draft phase")
    assert f"cycle {scenario.cycle + 1} of" in _status(page) and "Draft" in _status(page), _status(page)
    page.screenshot(path=str(OUT / "40-scenario.png"))
    page.close()
    assert not errors, errors


@pytest.mark.slow
def test_default_pair_in_the_browser(browser) -> None:
    """The real default pair: opens, steps one cycle phase by phase; screenshots for the docs.
    (Its own server, the module's Chromium: two Playwright drivers cannot share one thread.)"""
    out = ARTIFACTS / "browser-default"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    proc, url = start_server("default", ready_s=90)
    try:
        page = browser.new_page(viewport={"width": 1920, "height": 1080})
        page.set_default_timeout(300_000)
        page.goto(url, wait_until="domcontentloaded")
        page.wait_for_selector(".svkv", timeout=300_000)
        _wait_idle(page, 300_000)
        page.screenshot(path=str(out / "0-prefill.png"), full_page=True)
        for i, phase in enumerate(["draft", "verify", "accept", "resolve", "rollback"]):
            _button(page, "next_phase").click()
            _wait_idle(page, 300_000)
            _no_exception(page, phase)
            page.screenshot(path=str(out / f"{i + 1}-{phase}.png"), full_page=True)
        page.close()
    finally:
        stop_server(proc)


# ---------------------------------------------------------------- token trees (standalone page) -----


# In the page: the moved K/V cell of node `a` (its data-key), kept before stepping to the rollback;
# then, right after the step, is it the same DOM node, and which transform animations run on it?
TREE_MOVE_JS = """([key]) => {
  const cell = document.querySelector(`#stage [data-key="${key}"]`);
  window.__treeCell = cell;
  window.__treeRect = cell.getBoundingClientRect().left;
  window.__specvizStage.next();
  const now = document.querySelector(`#stage [data-key="${key}"]`);
  const anims = now ? now.getAnimations().filter(a => a.effect && a.effect.getKeyframes()
    .some(k => k.transform && k.transform !== 'none')) : [];
  return {same: now === window.__treeCell, running: anims.filter(a => a.playState === 'running').length,
    before: window.__treeRect, title: document.querySelector('#stage').dataset.title};
}"""


def _tree_page(browser, path: Path, errors: list[str], reduced: bool = False):
    page = browser.new_page(viewport={"width": 1600, "height": 1100}, reduced_motion="reduce" if reduced else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_function("window.__specvizStage && document.querySelector('#stage .svkv')")
    page.add_style_tag(content="header { position: static !important; }")  # element shots not under the bar
    return page


def test_token_tree_panel_and_the_compaction_glide(browser) -> None:
    """A token-tree run on the standalone page (the app's stage script): the tree panel renders at
    accept with every node; stepping from resolve to rollback keeps the moved K/V cell as the same
    DOM node, runs a transform animation on it (FLIP) and leaves it in its committed column; with
    reduced motion nothing animates. Screenshots: tree-accept.png, tree-compaction.png."""
    from test_tree_view import moving_cycle, tree_run

    from specviz.viz import standalone

    rec = tree_run()
    tr = moving_cycle(rec)
    src, dst = tr.tree.moves[0]
    node = src - tr.tree.root_position
    key = f"tv{tr.cycle}-n{node}"
    path = OUT / "tree-run.html"
    path.write_text(standalone.run_html(rec), encoding="utf-8")
    errors: list[str] = []
    page = _tree_page(browser, path, errors)
    draft = 1 + 5 * tr.cycle
    page.evaluate(f"window.__specvizStage.seek({draft + 2})")  # accept
    page.wait_for_timeout(600)
    tree = page.locator("#stage .svtree")
    assert tree.locator("[data-role='tree-node']").count() == len(tr.tree.nodes)
    assert tree.locator("[data-role='tree-verdict']").count() == len(tr.tree.nodes)
    assert tree.locator("[data-role='tree-mask']").count() == 1
    tree.screenshot(path=str(OUT / "tree-accept.png"))
    tree.locator(f"[data-role='tree-node'][data-n='{node}']").focus()  # keyboard: one node lit everywhere
    lit = page.evaluate("[...document.querySelectorAll('#stage .svtree-lit')].map(e => e.dataset.n)")
    assert set(lit) == {str(node)} and len(lit) >= 4, lit  # its box, mask row and column, K/V cell
    page.evaluate(f"window.__specvizStage.seek({draft + 3})")  # resolve
    page.wait_for_timeout(600)
    seen = page.evaluate(TREE_MOVE_JS, [key])
    assert "rollback" in seen["title"], seen
    assert seen["same"], "the moved K/V cell was redrawn, not moved"
    assert seen["running"] >= 1, f"no transform animation on the moved cell: {seen}"
    page.wait_for_timeout(900)
    cell = page.locator(f"#stage [data-key='{key}']")
    assert cell.get_attribute("data-role") == "tree-move"
    assert cell.bounding_box()["x"] < seen["before"] - 10, "the moved cell did not end further left"
    page.locator("#stage [data-role='tree-kv']").screenshot(path=str(OUT / "tree-compaction.png"))
    page.locator("#stage .svtree").screenshot(path=str(OUT / "tree-rollback.png"))
    page.close()

    calm = _tree_page(browser, path, errors, reduced=True)
    calm.evaluate(f"window.__specvizStage.seek({draft + 3})")
    calm.wait_for_timeout(300)
    still = calm.evaluate(TREE_MOVE_JS, [key])
    assert still["same"] and still["running"] == 0, still
    calm.close()
    assert not errors, errors


# ---------------------------------------------------------------- a lecture's walk-through (issue 26) ----


def _cur(page) -> int:
    return page.evaluate("window.__specvizStage.state.cur")


def _steps_seen(page, ms: int) -> list[int]:
    """The steps the stage shows over `ms` milliseconds, each once, in order (sampled every 50 ms)."""
    seen: list[int] = []
    for _ in range(ms // 50):
        cur = _cur(page)
        if not seen or seen[-1] != cur:
            seen.append(cur)
        page.wait_for_timeout(50)
    return seen


def _history_label(page) -> str:
    return page.locator("[class*='st-key-history-'] [data-testid='stSliderThumbValue']").first.inner_text()


def test_play_pause_and_the_history_follow_the_step_on_screen(server: str, browser) -> None:
    """Play right after Back starts from the step on screen (it skipped 1·2 → 1·5: the server played
    from the step it was last told of), Pause stops on the step on screen (the timer's next step was
    on its way), and the history slider's label names the step shown, not the one of the last page
    run ("cycle 1 · 5" under cycle 2 · 5)."""
    errors: list[str] = []
    page = _open(browser, server, errors)
    for _ in range(3):
        _button(page, "next_phase").click()
        page.wait_for_timeout(150)
    _wait_idle(page)
    page.wait_for_timeout(4500)  # the page is drawn again for step 3: the slider with it
    _wait_idle(page)
    _button(page, "back").click()
    _button(page, "back").click()
    assert _cur(page) == 1
    assert _history_label(page) == "c" + _phase_title(page)[1:], (_history_label(page), _phase_title(page))
    _button(page, "play").click()  # within a second of Back: the server has not been told of step 1
    seen = _steps_seen(page, 2600)
    assert seen[:2] == [1, 2] and all(b == a + 1 for a, b in zip(seen, seen[1:])), seen
    page.keyboard.press("p")  # Pause, by the button's key (taken by the stage as the button's click is)
    paused = _cur(page)
    after = _steps_seen(page, 2500)
    assert after == [paused], (paused, after)
    _wait_idle(page)
    assert _cur(page) == paused and "Pause" not in _button(page, "play").inner_text()
    assert _history_label(page) == "c" + _phase_title(page)[1:]
    _button(page, "next_phase").click()  # and the slider keeps following the local steps
    assert _history_label(page) == "c" + _phase_title(page)[1:]
    _no_exception(page, "play and pause")
    page.close()
    assert not errors, errors


def test_clicks_while_a_setting_starts_a_new_run_count_for_the_new_run(server: str, browser) -> None:
    """A proposer changed, then Next cycle at once: the page is still starting the new run, so the click
    waits for it (stepped in the old run, it was undone by the new run's first payload: ten clicks
    ended at cycle 9)."""
    errors: list[str] = []
    page = _open(browser, server, errors)
    old = page.evaluate("window.__specvizStage.state.run")
    checked = page.locator("[data-testid='stSidebar'] input[type=radio]:checked").all_inner_texts()
    other = "Feature head (EAGLE-style)" if not any("Feature" in c for c in checked) else "Draft model (a small LM)"
    page.get_by_text(other).click()
    _button(page, "next_cycle").click()  # at once
    for _ in range(2):
        page.wait_for_timeout(300)
        _button(page, "next_cycle").click()
    page.wait_for_function("window.__specvizStage.state.cur === 15 && !window.__specvizStage.state.waiting",
                           timeout=120_000)
    _wait_idle(page)
    state = page.evaluate("({run: window.__specvizStage.state.run, cur: window.__specvizStage.state.cur})")
    assert state["run"] != old and state["cur"] == 15 and "cycle 3 of" in _status(page), (state, _status(page))
    _no_exception(page, "clicks during a new run")
    page.close()
    assert not errors, errors


def test_a_reload_brings_the_run_back_at_its_step(server: str, browser) -> None:
    """F5 opens a new session, which takes the runs over at the step shown (the last local steps told
    to the server as the page goes), not at a fresh prefill: with a secret the page left in a cookie
    as it went, which the next page deletes; the page's address carries nothing (issue 33, part 6)."""
    errors: list[str] = []
    page = _open(browser, server, errors)
    _button(page, "next_cycle").click()
    page.wait_for_timeout(200)
    _button(page, "next_phase").click()
    page.wait_for_timeout(200)
    _button(page, "next_phase").click()
    assert _cur(page) == 7
    run = page.evaluate("window.__specvizStage.state.run")
    assert "session" not in page.url
    page.reload(wait_until="domcontentloaded")
    _button(page, "next_phase").wait_for(timeout=90_000)
    _wait_idle(page)
    assert page.evaluate("window.__specvizStage.state.run") == run and _cur(page) == 7, _phase_title(page)
    assert "session" not in page.url and "specviz_resume" not in page.evaluate("document.cookie")
    assert _phase_title(page).startswith("Cycle 2 · 2")
    _no_exception(page, "after a reload")
    page.close()
    assert not errors, errors


def test_every_resource_is_served_by_the_app_itself(server: str, browser) -> None:
    """Offline, nothing may come from elsewhere: the page icon was a Material symbol fetched from a
    font CDN on every page (ERR_NAME_NOT_RESOLVED without a network)."""
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1920, "height": 1080})
    page.set_default_timeout(120_000)
    _watch_errors(page, errors, server)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(server, wait_until="domcontentloaded")
    _button(page, "next_phase").wait_for(timeout=90_000)
    _wait_idle(page)
    _button(page, "next_phase").click()
    _wait_idle(page)
    foreign = [u for u in asked if not u.startswith((server, "data:", "blob:"))]
    assert not foreign, foreign
    icons = page.evaluate("[...document.querySelectorAll('link[rel~=icon]')].map(l => l.href)")
    assert icons and all(h.startswith(("data:image/svg", server)) for h in icons), icons
    page.close()
    assert not errors, errors


def test_the_quiz_asks_beside_the_stage_with_nothing_chosen(server: str, browser) -> None:
    """A student's quiz: beside the stage (it sat under the token strip, off the screen), no answer
    chosen for them (it was "0"), and the feedback as large as the narrative (a small grey caption)."""
    errors: list[str] = []
    page = _open(browser, server, errors)
    page.locator(".st-key-quiz label").first.click()  # the sidebar's quiz toggle
    _wait_idle(page)
    for _ in range(2):  # draft, verify: the question
        _button(page, "next_phase").click()
        _wait_idle(page)
    form = page.locator(".st-key-quiz_form")
    form.wait_for(timeout=60_000)
    stage, box = page.locator(".svs").bounding_box(), form.bounding_box()
    assert box["x"] >= stage["x"] + stage["width"] - 1 and box["y"] + min(box["height"], 300) <= 1080, (stage, box)
    assert page.locator(".st-key-quiz_accepted input[type=radio]:checked").count() == 0
    assert _button(page, "quiz_submit").is_disabled()
    page.screenshot(path=str(OUT / "50-quiz-question.png"))
    page.locator(".st-key-quiz_accepted label").nth(1).click()
    _wait_idle(page)
    _button(page, "quiz_submit").click()
    _wait_idle(page)
    feedback = page.locator(".st-key-quiz_feedback p").first
    feedback.wait_for(timeout=60_000)
    sizes = page.evaluate("""() => [getComputedStyle(document.querySelector('.st-key-quiz_feedback p')).fontSize,
        getComputedStyle(document.querySelector('.svs [data-role=narrative]')).fontSize].map(parseFloat)""")
    assert sizes[0] >= sizes[1], sizes
    assert feedback.bounding_box()["x"] >= stage["x"] + stage["width"] - 1
    page.screenshot(path=str(OUT / "51-quiz-feedback.png"))
    _no_exception(page, "the quiz")
    page.close()
    assert not errors, errors
