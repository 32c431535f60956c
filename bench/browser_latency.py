"""Browser latency: click to painted on the stage, in one real headless Chromium page. Not a test.

`python -m bench.browser_latency [--pair default|tiny] [--phase-clicks 25] [--cycle-clicks 12]
[--cold-clicks 4] [--lecture] [--json FILE] [--into docs]` starts the app with `streamlit run` on a free port
(bench/load.py's `start_server`), opens one page at 1920x1080 (Debian's /usr/bin/chromium via
Playwright, launched as in tests/test_browser.py), lets the pair load and warms up (one cycle phase
by phase, one Next cycle), then measures **Next phase** and **Next cycle** clicks one at a time.
The pair's default proposer is used (the sidebar is left as it opens); `--lecture` switches lecture
mode on first (the heavier screen: token text in every cell, the cards' bars) and reports under
`browser_latency_lecture`.

The stage is a component that steps through the phases it has in the browser and asks the server
only for what it lacks (docs/design.md §3, "The stage"); the next cycle is prefetched once a cycle
is on screen. So a click is one of three kinds, and each is reported on its own:

* **local** — the step was in the browser: the click repaints without a request;
* **prefetched** — a Next cycle whose cycle had arrived in advance (a local step too);
* **asked** — the browser had to ask the server (a cycle not yet there): the click waits for the
  server's answer. The *cold* clicks are Next cycle clicks made in a row, each the moment the one
  before painted, until one lands past the cycles the server keeps computed ahead (`PREFETCH_DEPTH`); their
  server-side compute time (the cycle's `timings_ms`, sent with the step) is reported beside them.

What "painted" means here: timed inside the page with `performance.now()` from just before the
page's own `.click()` on the stage button (no Playwright round trip in the number); a
`requestAnimationFrame` loop checks every frame that the stage's title (`.svs[data-title]`) has
changed and no request is pending; *painted* is the first frame after the one that saw it (a rAF
callback runs before its frame is painted, so the next callback marks the paint). The loop then
keeps sampling for 400 ms. The frames that began before the step's animations (glides, fade-ins,
cross-fades: `getAnimations`, all `finished`) ended are the transition: their gaps give its frame
rate and its worst gap (the bounds). The worst gap over the whole 400 ms is reported beside it: a
report to the server is sent the moment the motion has run, and the frame that sends it moves
nothing on screen.

Goals (the issue's bounds): Next phase median ≤ 50 ms and p95 ≤ 120 ms; Next cycle (prefetched)
median ≤ 120 ms; not prefetched, the cycle's compute time + ≤ 150 ms; ≥ 50 fps median during a
transition and no frame gap over 100 ms. `--into docs` puts the tables into docs/benchmarks.md
between `<!-- browser_latency:begin/end -->` and the result into docs/benchmarks.json under
"browser_latency", as `python -m bench.load --into docs` does.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from . import separate
from .load import CHROMIUM, CHROMIUM_ARGS, percentiles, server_env, start_server, stop_server

NEXT_PHASE, NEXT_CYCLE = "next_phase", "next_cycle"  # the buttons' Streamlit keys (specviz/ui/stage.py)
LABELS = {NEXT_PHASE: "Next phase", NEXT_CYCLE: "Next cycle"}
GOALS = {  # (median, p95) click to painted, in ms; None: no bound
    ("next_phase", "local"): (50.0, 120.0),
    ("next_cycle", "prefetched"): (120.0, None),
}
EXTRA_MS = 150.0  # a click the server must answer: its cycle's compute time + at most this
FPS_GOAL, GAP_GOAL_MS = 50.0, 100.0
VIEWPORT = {"width": 1920, "height": 1080}
SAMPLE_MS = 400  # frames sampled after the paint: the transitions run 300 ms, FLIP moves 340 ms (+ a margin)

# The step a button shows from step `cur` (stage_timeline.js `nextCycleTarget`: Next cycle ends the cycle, or
# the next one at a cycle's end).
TARGET_JS = """const svTarget = (key, cur) => key === 'next_phase' ? cur + 1
  : (cur % 5 === 0 ? cur + 5 : Math.ceil(cur / 5) * 5);"""

# One click, timed in the page (see the module docstring).
CLICK_JS = """([key, timeoutMs, sampleMs]) => new Promise(resolve => {
  """ + TARGET_JS + """
  const stage = window.__specvizStage;
  const root = document.querySelector('.svs');
  const btn = document.querySelector('.st-key-' + key + ' button');
  if (!stage || !root || !btn) { resolve({error: 'no stage or no button ' + key}); return; }
  const title0 = root.dataset.title, seq0 = stage.state.seq;
  const target = svTarget(key, stage.state.cur);
  const had = !!stage.state.data.steps[String(target)];
  let seenAt = null, painted = null, last = null, motionEnd = null;
  const gaps = [], gapEnds = [], moving = [];
  const t0 = performance.now();
  btn.click();
  const asked = stage.state.waiting, at = performance.timeOrigin + t0;
  function tick() {
    const now = performance.now();
    if (painted !== null) {
      gaps.push(now - last); gapEnds.push(Math.round(now - t0));
      moving.push(motionEnd === null || last < motionEnd);  // the frame began while the step's motion ran
    }
    last = now;
    if (seenAt !== null && painted === null) {
      painted = now - t0;
      // The transition: until every animation the step started (glides, fade-ins, cross-fades) is done.
      const anims = root.getAnimations ? root.getAnimations({subtree: true}) : [];
      Promise.all(anims.map(a => a.finished.catch(() => null))).then(() => { motionEnd = performance.now(); });
    }
    if (seenAt === null && root.dataset.title !== title0 && !stage.state.waiting) seenAt = now;
    if (painted !== null && now - t0 - painted >= sampleMs) {
      const step = stage.state.data.steps[String(stage.state.cur)] || {};
      // An asked click's round trip, split by the stamps of the payload that answered it.
      // The payload that brought the step: the request's answer, or one before it (e.g. the one
      // answering the report that started computing the cycle before the click; toServer < 0 then).
      const t = asked ? stage.state.timings.filter(x => x.done >= at && x.done <= at + painted).pop() : null;
      const split = t ? {via: t.kind, toServer: t.event_at - at, callback: t.callback_ms,
                         runToPayload: t.built_at - t.event_at - t.callback_ms, build: t.build_ms,
                         transit: t.arrived - t.built_at, unpack: t.unpacked - t.arrived, render: t.done - t.unpacked,
                         toPaint: at + painted - t.done} : null;
      // The stage's own messages meanwhile (ms since the click): what a long frame gap fell on.
      const events = stage.state.log.filter(e => e[0] >= t0).map(e => [Math.round(e[0] - t0), ...e.slice(1, 3)]);
      resolve({painted, from: title0, to: root.dataset.title, asked, had, seqMoved: stage.state.seq !== seq0,
               gaps, gapEnds, moving, computeMs: step.compute_ms, split, events});
      return;
    }
    if (now - t0 > timeoutMs) { resolve({error: 'no paint within ' + timeoutMs + ' ms', from: title0}); return; }
    requestAnimationFrame(tick);
  }
  requestAnimationFrame(tick);
})"""

IDLE_JS = """() => !!window.__specvizStage && !window.__specvizStage.state.waiting
  && !document.querySelector("[data-testid='stStatusWidget']")
  && document.querySelector('.svs').getAnimations({subtree: true}).every(a => a.playState !== 'running')"""

# Whether the step the button would show is already in the browser (the cold clicks run up to the
# first one that is not: the server keeps `PREFETCH_DEPTH` cycles computed ahead).
KNOWN_JS = """(key) => { const s = window.__specvizStage.state; """ + TARGET_JS + """
  return !!s.data.steps[String(svTarget(key, s.cur))] && !s.waiting; }"""
COLD_LEAD_MAX = 4  # quick clicks at most before a cold one (a text ends within a few cycles)

# At rest: every cycle the server computes ahead (two) has arrived, or the text ends before.
PREFETCHED_JS = """() => { const s = window.__specvizStage.state;
  const end = s.cur === 0 ? 0 : Math.ceil(s.cur / 5) * 5, has = n => !!s.data.steps[String(n)];
  return ((has(end + 1) && has(end + 6)) || !s.data.more) && !s.waiting; }"""


def _chromium_version() -> str:
    try:
        return subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "?"


def _wait_idle(page: Any, timeout_s: float, prefetched: bool = True) -> None:
    """The page at rest: no request, no script run, no motion; with `prefetched`, the next cycle in."""
    page.wait_for_timeout(150)
    page.wait_for_function(IDLE_JS, timeout=timeout_s * 1000)
    if prefetched:
        page.wait_for_function(PREFETCHED_JS, timeout=timeout_s * 1000)
    page.wait_for_timeout(250)  # let the page settle (a short think time)


def _open(page: Any, url: str, timeout_s: float, lecture: bool) -> None:
    """A fresh session on the page; in lecture mode when asked (the sidebar folds away by itself)."""
    page.goto(url, wait_until="domcontentloaded")
    page.locator(f".st-key-{NEXT_PHASE} button").first.wait_for(timeout=timeout_s * 1000)
    page.wait_for_function("() => !!window.__specvizStage", timeout=timeout_s * 1000)
    _wait_idle(page, timeout_s, prefetched=False)
    if lecture:
        # Streamlit keeps the sidebar folded across reloads (lecture mode folded it): open it to reach the toggle.
        if page.evaluate("() => document.querySelector(\"section[data-testid='stSidebar']\")"
                         ".getAttribute('data-collapsed') === 'true'"):
            page.locator("[data-testid='stExpandSidebarButton']").first.click()
        page.get_by_text("Lecture mode").first.click()
        page.wait_for_selector(".svs .svkv.svkv-lecture", timeout=timeout_s * 1000)
        _wait_idle(page, timeout_s, prefetched=False)


def _status(page: Any) -> str:
    loc = page.locator(".svs .svs-status")
    return loc.first.inner_text() if loc.count() else ""


def kind_of(click: dict[str, Any]) -> str:
    """local / prefetched / asked (see the module docstring)."""
    if click["asked"]:
        return "asked"
    return "prefetched" if click["button"] == NEXT_CYCLE else "local"


def _click(page: Any, reopen: Any, key: str, timeout_s: float, say: Any, cold: bool = False) -> dict[str, Any] | None:
    """One timed click; None when it was not counted (the text had finished: a fresh session)."""
    if "finished:" in _status(page) or page.evaluate("() => !window.__specvizStage.state.data.more"):
        say("  the text finished: reloading for a fresh run")
        reopen()
        _wait_idle(page, timeout_s)
    if cold:  # clicks in a row, each the moment the one before painted, until the browser must ask
        for attempt in range(2):
            for _ in range(COLD_LEAD_MAX):
                if not page.evaluate(KNOWN_JS, key):
                    break
                page.evaluate(CLICK_JS, [key, timeout_s * 1000, 0])
            if page.evaluate("() => window.__specvizStage.state.data.more") or attempt:
                break
            say("  the text finished during the lead-in: reloading for a fresh run")
            reopen()
            _wait_idle(page, timeout_s)
    got = page.evaluate(CLICK_JS, [key, timeout_s * 1000, SAMPLE_MS])
    _wait_idle(page, timeout_s)
    if page.locator("[data-testid='stException']").count():
        got["error"] = "exception box on the page"
    if "error" not in got and page.locator("[data-testid='stAlert']", has_text="finished").count():
        say(f"  {LABELS[key]} met a finished text: not counted")
        return None
    return got


def run(
    pair: str = "default", phase_clicks: int = 25, cycle_clicks: int = 12, cold_clicks: int = 4,
    timeout_s: float = 300.0, say: Any = print, lecture: bool = False,
) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    load_start = os.getloadavg()
    proc, url = start_server(pair, ready_s=180)
    clicks: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(timeout_s * 1000)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            t0 = time.perf_counter()
            def reopen() -> None:
                _open(page, url, timeout_s, lecture)

            reopen()  # loads the pair once, outside the measurement
            open_s = time.perf_counter() - t0
            status = _status(page)
            proposer = status.rsplit("proposer:", 1)[-1].strip() if "proposer:" in status else "?"
            say(f"browser latency: {pair} pair, proposer {proposer}, page open in {open_s:.1f} s")
            _wait_idle(page, timeout_s)
            for key in [NEXT_PHASE] * 5 + [NEXT_CYCLE]:  # warm-up: one cycle phase by phase, one whole
                _click(page, reopen, key, timeout_s, say)
            plan = [(NEXT_PHASE, phase_clicks, False), (NEXT_CYCLE, cycle_clicks, False),
                    (NEXT_CYCLE, cold_clicks, True)]
            for key, n, cold in plan:
                for i in range(n):
                    got = _click(page, reopen, key, timeout_s, say, cold=cold)
                    if got is None:
                        continue
                    if "error" in got:
                        errors.append(f"{LABELS[key]} #{i + 1}: {got['error']}")
                        continue
                    gaps, ends, events = got.pop("gaps"), got.pop("gapEnds"), got.pop("events")
                    motion = [g for g, m in zip(gaps, got.pop("moving"), strict=True) if m]
                    click = {"button": key, "cold": cold, **got,
                             "fps_median": 1000 / statistics.median(motion) if motion else None,
                             "max_gap_ms": max(motion) if motion else None,
                             "window_max_gap_ms": max(gaps) if gaps else None}
                    click["kind"] = kind_of(click)
                    clicks.append(click)
                    extra = f" (cycle computed in {got['computeMs']:.0f} ms)" if click["kind"] == "asked" else ""
                    if got.get("split"):
                        extra += " — " + ", ".join(f"{k} {v:.0f}" if isinstance(v, (int, float)) else f"{k} {v}"
                                                     for k, v in got["split"].items())
                    if gaps and max(gaps) > GAP_GOAL_MS:  # when the long frame came, and what the stage did
                        worst = gaps.index(max(gaps))
                        extra += f" — the long frame ended {ends[worst]} ms after the click; stage: {events}"
                    say(f"  {LABELS[key]:10s} {click['kind']:10s} {got['from']!r} → {got['to']!r}: painted "
                        f"{got['painted']:.0f} ms, {_fps(click['fps_median'])}, max gap {_ms(click['max_gap_ms'])} "
                        f"in motion, {_ms(click['window_max_gap_ms'])} in {SAMPLE_MS} ms{extra}")
            browser.close()
    finally:
        stop_server(proc)
    return {"pair": pair, "proposer": proposer, "viewport": f"{VIEWPORT['width']}x{VIEWPORT['height']}",
            "mode": "lecture" if lecture else "normal",
            "open_s": open_s, "rows": rows_of(clicks), "frames": frames_of(clicks), "clicks": clicks, "errors": errors,
            "cores": os.cpu_count(), "loadavg_start": list(load_start), "loadavg_end": list(os.getloadavg()),
            "chromium": _chromium_version(), "machine": platform.platform(), "server_env": server_env()}


def rows_of(clicks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (button, kind): the painted times, and the goal where the issue sets one."""
    rows = []
    for key in (NEXT_PHASE, NEXT_CYCLE):
        for kind in ("local", "prefetched", "asked"):
            mine = [c for c in clicks if c["button"] == key and c["kind"] == kind]
            if not mine:
                continue
            stats = percentiles([c["painted"] for c in mine], ("median_ms", "p95_ms", "max_ms"))
            row = {"button": key, "kind": kind, **stats, "all_ms": [round(c["painted"]) for c in mine]}
            goal = GOALS.get((key, kind))
            if goal is not None:
                med, p95 = goal
                row["goal"] = f"median ≤ {med:.0f} ms" + (f", p95 ≤ {p95:.0f} ms" if p95 else "")
                row["goal_met"] = stats["median_ms"] <= med and (p95 is None or stats["p95_ms"] <= p95)
            else:  # asked: each click against its own cycle's compute time
                over = [c["painted"] - (c.get("computeMs") or 0) for c in mine]
                row["over_compute_ms"] = [round(x) for x in over]
                row["goal"] = f"compute + ≤ {EXTRA_MS:.0f} ms"
                row["goal_met"] = max(over) <= EXTRA_MS
            rows.append(row)
    return rows


def frames_of(clicks: list[dict[str, Any]]) -> dict[str, Any]:
    """Frame rate during the transitions (the frames that began while the step's animations ran):
    median of the per-click medians, the worst gap; and the worst gap in the whole sampled window
    (after the motion too: a long frame then moves nothing on screen, but it is reported)."""
    fps = [c["fps_median"] for c in clicks if c.get("fps_median")]
    gaps = [c["max_gap_ms"] for c in clicks if c.get("max_gap_ms") is not None]
    window = [c["window_max_gap_ms"] for c in clicks if c.get("window_max_gap_ms") is not None]
    med = statistics.median(fps) if fps else None
    worst = max(gaps) if gaps else None
    return {"fps_median": med, "max_gap_ms": worst, "clicks_over_gap": sum(g > GAP_GOAL_MS for g in gaps),
            "window_max_gap_ms": max(window) if window else None,
            "window_clicks_over_gap": sum(g > GAP_GOAL_MS for g in window),
            "goal_met": med is not None and med >= FPS_GOAL and worst is not None and worst <= GAP_GOAL_MS}


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f} ms"


def _fps(x: float | None) -> str:
    return "no motion" if x is None else f"{x:.0f} fps"


def markdown(result: dict[str, Any]) -> str:
    """The latency tables for docs/benchmarks.md: the summary, then every click."""
    load = ", ".join(f"{x:.1f}" for x in result["loadavg_start"])
    lines = [
        "## Browser latency: click to painted" + (" (lecture mode)" if result.get("mode") == "lecture" else ""),
        "",
        f"`python -m bench.browser_latency{' --lecture' if result.get('mode') == 'lecture' else ''}` — one headless "
        f"Chromium page ({result['viewport']}, {result.get('mode', 'normal')} mode) on the "
        f"{result['pair']} pair with its default proposer ({result['proposer']}), clicks one at a time after a "
        "warm-up, the page at rest between clicks (the next cycles prefetched, except for the *cold* Next "
        "cycle clicks, made in a row until one lands past what the server computed ahead). Timed in the page "
        "from just before the click to the first animation frame after the stage shows the new step "
        "(*painted*). *local*: the step was in the browser; *prefetched*: a Next cycle whose cycle had arrived "
        "in advance; *asked*: the browser had to ask the "
        f"server. {result['cores']} cores, load average at the start {load}; {result['chromium']}.",
        "",
        "| button | kind | clicks | painted median | p95 | max | goal | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {LABELS[row['button']]} | {row['kind']} | {row['n']} | {_ms(row['median_ms'])} | "
            f"{_ms(row['p95_ms'])} | {_ms(row['max_ms'])} | {row['goal']} | {'yes' if row['goal_met'] else 'no'} |"
        )
    f = result["frames"]
    lines += [
        "",
        f"Frames during the transitions (from the paint until the step's animations end): median "
        f"{f['fps_median'] or 0:.0f} fps (goal ≥ {FPS_GOAL:.0f}), worst gap {_ms(f['max_gap_ms'])} (goal ≤ "
        f"{GAP_GOAL_MS:.0f} ms; {f['clicks_over_gap']} click(s) over it): {'met' if f['goal_met'] else 'not met'}. "
        f"Over the whole {SAMPLE_MS} ms after each paint, motion or not, the worst gap was "
        f"{_ms(f.get('window_max_gap_ms'))} ({f.get('window_clicks_over_gap', 0)} click(s) over {GAP_GOAL_MS:.0f} ms).",
        "",
        "Every click (painted, ms):",
        "",
    ]
    for row in result["rows"]:
        extra = f"; minus the cycle's compute time: {row['over_compute_ms']}" if "over_compute_ms" in row else ""
        lines.append(f"- {LABELS[row['button']]}, {row['kind']}: {row['all_ms']}{extra}")
    if result["errors"]:
        lines += ["", f"Errors: {len(result['errors'])} (first: {result['errors'][0]})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.browser_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="default", choices=["default", "tiny"])
    ap.add_argument("--phase-clicks", type=int, default=25)
    ap.add_argument("--cycle-clicks", type=int, default=12)
    ap.add_argument("--cold-clicks", type=int, default=4, help="Next cycle clicks past what was computed ahead")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a click (or the page) is an error")
    ap.add_argument("--lecture", action="store_true", help="measure in lecture mode (the sidebar folded away)")
    ap.add_argument("--json", type=Path, help="also write the result as JSON here")
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md, the result into .json")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} (Debian's chromium) is needed")
    result = run(args.pair, args.phase_clicks, args.cycle_clicks, args.cold_clicks, args.timeout, lecture=args.lecture)
    name = "browser_latency_lecture" if args.lecture else "browser_latency"
    separate.publish(name, markdown(result), result, args.json, args.into)
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
