"""Browser latency: click to rendered on the stage, in one real headless Chromium page. Not a test.

`python -m bench.browser_latency [--pair default|tiny] [--phase-clicks 25] [--cycle-clicks 12]
[--json FILE] [--into docs]` starts the app with `streamlit run` on a free port (bench/load.py's
`start_server`), opens one page at 1920x1080 (Debian's /usr/bin/chromium via Playwright, launched as
in tests/test_browser.py), lets the pair load and warms up (one cycle phase by phase, one Next
cycle), then measures **Next phase** and **Next cycle** clicks one at a time, with the page idle
between clicks. The pair's default proposer is used (the sidebar is left as it opens).

What "rendered" means here, precisely. Everything is timed inside the page with
`performance.now()`:

* t0 — immediately before the script in the page calls `.click()` on the stage button (the click
  is dispatched from the page itself, so Playwright's round trip is not in the number).
* A `requestAnimationFrame` loop then checks, once per frame, three conditions:
  (a) the KV picture is new: the `.svkv` element is not the node shown before the click, and its
      phase title (`.svkv .svkv-phase`, e.g. "Cycle 3 · 2 · Target verifies") differs from the
      title before the click;
  (b) Streamlit's running indicator (`[data-testid=stStatusWidget]`) is not in the DOM;
  (c) no element is still marked stale (`[data-stale=true]`): the run has finished drawing the
      whole stage fragment (buttons, picture, narrative, token strip, slider and the open tab
      below it), and Streamlit has dropped what the run did not redraw.
* **picture** = the time of the first animation frame *after* the frame in which (a) first held,
  minus t0: the frame holding the new picture has been produced (a rAF callback runs before its
  frame is painted, so the next callback marks the paint).
* **rendered** = the same for (a) ∧ (b) ∧ (c): the click's whole re-run is on screen. The goals
  apply to this one. The CSS animations that then run for 700 ms (viz/kv_html.ANIM_MS) are not
  counted: they start on the first rendered frame.

The resolution is one animation frame, so on a loaded machine (software compositing in headless
Chromium) the frame rate itself adds to the numbers. A click that lands on a finished text (the
decoder stopped) reloads the page: a fresh session starts a new run, and that click is not counted.

Goals (the issue's bounds): Next phase median ≤ 300 ms, Next cycle median ≤ 600 ms. `--into docs`
puts the table into docs/benchmarks.md between `<!-- browser_latency:begin/end -->` and the result
into docs/benchmarks.json under "browser_latency", as `python -m bench.load --into docs` does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from . import separate
from .load import CHROMIUM, CHROMIUM_ARGS, _quantile, start_server, stop_server

NEXT_PHASE, NEXT_CYCLE = "next_phase", "next_cycle"  # the buttons' Streamlit keys (specviz/ui/stage.py)
LABELS = {NEXT_PHASE: "Next phase", NEXT_CYCLE: "Next cycle"}
GOALS_MS = {NEXT_PHASE: 300.0, NEXT_CYCLE: 600.0}  # median, click to rendered
VIEWPORT = {"width": 1920, "height": 1080}
STATUS_LINE = "committed before this cycle"

# One click, timed in the page (see the module docstring for the conditions).
CLICK_JS = """([key, timeoutMs]) => new Promise(resolve => {
  const btn = document.querySelector('.st-key-' + key + ' button');
  if (!btn || btn.disabled) { resolve({error: 'button ' + key + ' missing or disabled'}); return; }
  const kv0 = document.querySelector('.svkv');
  const title0 = kv0 ? kv0.querySelector('.svkv-phase').textContent : null;
  let pictureAt = null, renderedAt = null, picture = null, statusSeen = false, frames = 0;
  const t0 = performance.now();
  btn.click();
  function tick() {
    const now = performance.now();
    frames += 1;
    if (pictureAt !== null && picture === null) picture = now - t0;
    if (renderedAt !== null) {
      const title = document.querySelector('.svkv .svkv-phase').textContent;
      resolve({picture, rendered: now - t0, from: title0, to: title, statusSeen, frames});
      return;
    }
    const kv = document.querySelector('.svkv');
    const newPicture = !!kv && kv !== kv0 && kv.querySelector('.svkv-phase').textContent !== title0;
    const running = !!document.querySelector("[data-testid='stStatusWidget']");
    statusSeen = statusSeen || running;
    const stale = !!document.querySelector("[data-stale='true']");
    if (newPicture && pictureAt === null) pictureAt = now;
    if (newPicture && !running && !stale) renderedAt = now;
    if (now - t0 > timeoutMs) { resolve({error: 'no render within ' + timeoutMs + ' ms', from: title0}); return; }
    requestAnimationFrame(tick);
  }
  requestAnimationFrame(tick);
})"""

IDLE_JS = """() => !document.querySelector("[data-testid='stStatusWidget']")
  && !document.querySelector("[data-stale='true']") && !!document.querySelector('.svkv')
  && document.querySelector('.svkv').getAnimations({subtree: true}).every(a => a.playState !== 'running')"""


def _stats(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0, "median_ms": None, "p90_ms": None, "max_ms": None}
    xs = sorted(xs)
    return {"n": len(xs), "median_ms": statistics.median(xs), "p90_ms": _quantile(xs, 0.9), "max_ms": xs[-1]}


def _chromium_version() -> str:
    try:
        return subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "?"


def _wait_idle(page: Any, timeout_s: float) -> None:
    page.wait_for_timeout(150)
    page.wait_for_function(IDLE_JS, timeout=timeout_s * 1000)
    page.wait_for_timeout(250)  # let the page settle (a short think time)


def _open(page: Any, url: str, timeout_s: float) -> None:
    page.goto(url, wait_until="domcontentloaded")
    page.locator(f".st-key-{NEXT_PHASE} button").first.wait_for(timeout=timeout_s * 1000)
    _wait_idle(page, timeout_s)


def _status(page: Any) -> str:
    loc = page.locator("[data-testid='stMarkdown']", has_text=STATUS_LINE)
    return loc.first.inner_text() if loc.count() else ""


def _click(page: Any, url: str, key: str, timeout_s: float, say: Any) -> dict[str, Any] | None:
    """One timed click; None when it was not counted (the text had finished: a fresh session)."""
    if "finished:" in _status(page):
        say("  the text finished: reloading for a fresh run")
        _open(page, url, timeout_s)
    got = page.evaluate(CLICK_JS, [key, timeout_s * 1000])
    _wait_idle(page, timeout_s)
    if page.locator("[data-testid='stException']").count():
        got["error"] = "exception box on the page"
    if "error" not in got and page.locator("[data-testid='stAlert']", has_text="finished").count():
        say(f"  {LABELS[key]} met a finished text: not counted")
        return None
    return got


def run(
    pair: str = "default", phase_clicks: int = 25, cycle_clicks: int = 12, timeout_s: float = 300.0, say: Any = print
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
            _open(page, url, timeout_s)  # loads the pair once, outside the measurement
            open_s = time.perf_counter() - t0
            status = _status(page)
            proposer = status.rsplit("proposer:", 1)[-1].strip() if "proposer:" in status else "?"
            say(f"browser latency: {pair} pair, proposer {proposer}, page open in {open_s:.1f} s")
            for key in [NEXT_PHASE] * 5 + [NEXT_CYCLE]:  # warm-up: one cycle phase by phase, one whole
                _click(page, url, key, timeout_s, say)
            for key, n in ((NEXT_PHASE, phase_clicks), (NEXT_CYCLE, cycle_clicks)):
                for i in range(n):
                    got = _click(page, url, key, timeout_s, say)
                    if got is None:
                        continue
                    if "error" in got:
                        errors.append(f"{LABELS[key]} #{i + 1}: {got['error']}")
                        continue
                    clicks.append({"button": key, **got})
                    say(f"  {LABELS[key]:10s} {got['from']!r} → {got['to']!r}: picture {got['picture']:.0f} ms, "
                        f"rendered {got['rendered']:.0f} ms")
            browser.close()
    finally:
        stop_server(proc)
    rows = {}
    for key in (NEXT_PHASE, NEXT_CYCLE):
        mine = [c for c in clicks if c["button"] == key]
        rows[key] = {
            "rendered": _stats([c["rendered"] for c in mine]),
            "picture": _stats([c["picture"] for c in mine]),
            "goal_median_ms": GOALS_MS[key],
        }
        med = rows[key]["rendered"]["median_ms"]
        rows[key]["goal_met"] = med is not None and med <= GOALS_MS[key]
    return {
        "pair": pair,
        "proposer": proposer,
        "viewport": f"{VIEWPORT['width']}x{VIEWPORT['height']}",
        "open_s": open_s,
        "rows": rows,
        "clicks": clicks,
        "errors": errors,
        "cores": os.cpu_count(),
        "loadavg_start": list(load_start),
        "loadavg_end": list(os.getloadavg()),
        "chromium": _chromium_version(),
        "machine": platform.platform(),
        "server_env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith("SPECVIZ_")},
    }


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f} ms"


def markdown(result: dict[str, Any]) -> str:
    """The latency table for docs/benchmarks.md."""
    load = ", ".join(f"{x:.1f}" for x in result["loadavg_start"])
    lines = [
        "## Browser latency: click to rendered",
        "",
        f"`python -m bench.browser_latency` — one headless Chromium page ({result['viewport']}) on the "
        f"{result['pair']} pair with its default proposer ({result['proposer']}), clicks one at a time after a "
        "warm-up. Timed in the page from just before the click is dispatched to the first animation frame after "
        "the new KV picture is in the DOM, Streamlit's running indicator is gone and nothing is stale "
        "(*rendered*); *picture* stops at the new picture alone. A Next phase click computes a new cycle once "
        f"every five clicks; every Next cycle click computes one. {result['cores']} cores, load average at the "
        f"start {load}; {result['chromium']}.",
        "",
        "| button | clicks | rendered median | p90 | max | picture median | goal (median) | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, row in result["rows"].items():
        r, pic = row["rendered"], row["picture"]
        lines.append(
            f"| {LABELS[key]} | {r['n']} | {_ms(r['median_ms'])} | {_ms(r['p90_ms'])} | {_ms(r['max_ms'])} | "
            f"{_ms(pic['median_ms'])} | ≤ {row['goal_median_ms']:.0f} ms | {'yes' if row['goal_met'] else 'no'} |"
        )
    if result["errors"]:
        lines += ["", f"Errors: {len(result['errors'])} (first: {result['errors'][0]})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.browser_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="default", choices=["default", "tiny"])
    ap.add_argument("--phase-clicks", type=int, default=25)
    ap.add_argument("--cycle-clicks", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a click (or the page) is an error")
    ap.add_argument("--json", type=Path, help="also write the result as JSON here")
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md, the result into .json")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} (Debian's chromium) is needed")
    result = run(args.pair, args.phase_clicks, args.cycle_clicks, args.timeout)
    print()
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.into:
        separate.update_markdown(args.into / "benchmarks.md", "browser_latency", markdown(result))
        separate.update_json(args.into / "benchmarks.json", "browser_latency", result)
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
