"""Motion cost: the browser CPU one Next phase click spends, with motion and without. Not a test.

`python -m bench.motion_cost [--clicks 20] [--gap 0.5] [--cycles 5] [--pair default|tiny] [--json F] [--into DIR]`

On a classroom server the students' browsers may share the server's cores (`bench.load` runs its N
headless Chromiums there), and a software-rendered page pays for every animation frame: style,
paint, raster of the damaged tiles and compositing. This benchmark isolates that cost from the
server: it records a run on the pair (`--cycles` cycles of the default prompt's kind), writes the
standalone run page (`specviz.viz.standalone`, the app's own stage script, no server behind it),
opens it in headless Chromium (the flags of `bench.load`) at 1920x1080 and presses → `--clicks`
times, `--gap` seconds apart. It reads the CPU time of every Chromium process from /proc before
and after (user + system, so other load on the machine inflates it little) and reports it per
click and per kind of process, in three modes:

* **motion** — the stage as shipped (cross-fades, FLIP glides, fade-ins);
* **no Web Animations** — `Element.animate` made a no-op (the glides and fade-ins off, CSS
  transitions on): what the Web Animations cost;
* **reduced motion** — `prefers-reduced-motion: reduce` (no motion at all): the patch, layout and
  paint that every click needs.

Per-click CPU x clicks per second x browsers is the share of the cores the browsers take.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from . import separate
from .load import CHROMIUM, CHROMIUM_ARGS

NAME = "motion_cost"
MODES = {"motion": {}, "no Web Animations": {"no_waapi": True}, "reduced motion": {"reduced": True}}
NO_WAAPI_JS = "Element.prototype.animate = function () { return {finished: Promise.resolve(), cancel() {}}; };"
PROMPT = "How do lighthouses help ships at night?"


def record_page(pair_name: str, cycles: int, out: Path) -> Path:
    """A run of `cycles` cycles on the pair, written as the standalone page."""
    import specviz
    from specviz.ui.runs import record_of
    from specviz.ui.state import advance_cycle, start_live_run
    from specviz.viz.standalone import run_html

    from .common import encode

    pair = specviz.load_default_pair() if pair_name == "default" else specviz.build_tiny_pair(seed=0)
    ids = encode(pair.tokenizer, PROMPT)  # the tiny pair's tokenizer has no chat template: plain ids
    run = start_live_run(1, "motion cost", (), pair, specviz.DecodeConfig(k=4, seed=1), ids)
    for _ in range(cycles):
        run = advance_cycle(run)
    out.write_text(run_html(record_of(run)), encoding="utf-8")
    return out


def chromium_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of every Chromium process, by kind (browser, renderer, gpu...),
    read as bench.load's CpuSampler reads them (psutil)."""
    import psutil

    per: dict[str, float] = {}
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        times, cmd = proc.info["cpu_times"], proc.info["cmdline"] or []
        if "chrom" not in (proc.info["name"] or "") or times is None:  # not Chromium, or just ended
            continue
        kind = next((k for k in ("renderer", "gpu-process", "utility") if f"--type={k}" in cmd), "browser")
        per[kind] = per.get(kind, 0.0) + times.user + times.system
    return per


def measure(page_path: Path, clicks: int, gap: float, reduced: bool = False, no_waapi: bool = False) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1920, "height": 1080},
                                    reduced_motion="reduce" if reduced else "no-preference")
            if no_waapi:
                page.add_init_script(NO_WAAPI_JS)
            page.goto(page_path.as_uri())
            page.wait_for_function("() => window.__specvizStage && window.__specvizStage.state.cur === 0")
            time.sleep(1.0)
            before, t0 = chromium_cpu(), time.perf_counter()
            for _ in range(clicks):
                page.keyboard.press("ArrowRight")
                time.sleep(gap)
            time.sleep(0.6)  # the last click's motion
            after, wall = chromium_cpu(), time.perf_counter() - t0
            shown = page.evaluate("() => window.__specvizStage.state.cur")
        finally:
            browser.close()
    per_kind = {k: 1000 * (after.get(k, 0.0) - before.get(k, 0.0)) / clicks for k in after}
    return {"ms_per_click": sum(per_kind.values()), "per_kind_ms": per_kind, "wall_s": wall, "shown": shown}


def run(pair: str, cycles: int, clicks: int, gap: float, log=print, note: str = "") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        page = record_page(pair, cycles, Path(tmp) / "run.html")
        log(f"standalone page: {page.stat().st_size / 1e3:.0f} kB, {cycles} cycles")
        modes = {}
        for name, opts in MODES.items():
            modes[name] = measure(page, clicks, gap, **opts)
            log(f"{name}: {modes[name]['ms_per_click']:.0f} ms of browser CPU per click")
    return {"pair": pair, "cycles": cycles, "clicks": clicks, "gap_s": gap, "modes": modes, "note": note,
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "load_average": os.getloadavg()}


def markdown(result: dict[str, Any]) -> str:
    kinds = sorted({k for m in result["modes"].values() for k in m["per_kind_ms"]})
    lines = [
        "### Motion cost: browser CPU per Next phase click (motion_cost)",
        "",
        f"`python -m bench.motion_cost` — the standalone page of a {result['cycles']}-cycle run on the "
        f"{result['pair']} pair (the app's stage script), headless Chromium (software rendering) at 1920x1080, "
        f"{result['clicks']} presses of → {result['gap_s']} s apart; CPU time of the Chromium processes from "
        f"/proc, per click. {result['cores']} cores; load average "
        f"{', '.join(f'{x:.1f}' for x in result['load_average'])} at the end (other work on the machine "
        "inflates CPU time a little, not much).",
        *(["", result["note"]] if result.get("note") else []),
        "",
        "| mode | ms CPU per click | " + " | ".join(kinds) + " |",
        "|---|---:|" + "---:|" * len(kinds),
    ]
    for name, m in result["modes"].items():
        lines.append(f"| {name} | {m['ms_per_click']:.0f} | "
                     + " | ".join(f"{m['per_kind_ms'].get(k, 0.0):.0f}" for k in kinds) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.motion_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", choices=("default", "tiny"), default="default")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--clicks", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.5)
    ap.add_argument("--note", default="", help="a sentence for the report (what was compared, the machine's load)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md/.json")
    args = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        ap.error(f"{CHROMIUM} is not installed (the README's test command installs it)")
    result = run(args.pair, args.cycles, min(args.clicks, 5 * args.cycles), args.gap, note=args.note)
    separate.publish(NAME, markdown(result), result, args.json, args.into)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
