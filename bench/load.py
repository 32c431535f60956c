"""Load: many sessions stepping the served app at once (issue 10, part 2). Not a test.

`python -m bench.load [--sessions 1,4,8,16] [--pair default|tiny] [--client auto|ws|browser]`
starts the real app with `streamlit run` on a free port — one fresh server per N, so its RSS is
that of N sessions — and opens N concurrent sessions that each click **Next phase** through a
cycle and then **Next cycle**, a few times, with a short think time between clicks. Per N it
reports the click-to-rendered time (p50 / p95, per button), the time to open the page, errors
(exceptions on the page, error boxes, protocol failures), how many clicks met the "server is
busy" message, and the server's RSS (after start-up, and the peak while the sessions ran).

Two kinds of client:

* `ws` — a Streamlit websocket client speaking the app's own protocol (the `BackMsg` /
  `ForwardMsg` protobufs that ship with Streamlit): a click is a `rerun_script` with the button's
  trigger, and "rendered" is the server's `script_finished` after every delta of that run has
  arrived. It measures the server and the wire, not the browser's drawing of the charts.
* `browser` — headless Chromium pages driven by Playwright (Debian's /usr/bin/chromium, launched
  as in tests/test_browser.py): "rendered" is the moment the stage component shows the new step
  (its title changed and it waits for no answer from the server). The stage steps through the
  phases it has in the browser and prefetches the next cycle (docs/design.md §3, "The stage"), so
  most clicks never reach the server; the ones that do wait for it.
  `auto` picks it when /usr/bin/chromium exists, else `ws`.

It is also the optional `load` section of the suite (`python -m bench --sections load`), which is
not in the default SECTIONS: `bash scripts/bench.sh` does not run it. Server settings reach the
server through the environment (e.g. `SPECVIZ_MAX_DECODING=2 python -m bench.load`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import separate

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NEXT_PHASE, NEXT_CYCLE = "Next phase", "Next cycle"
# One cycle phase by phase, then a whole cycle at once: what a student does.
PATTERN = (NEXT_PHASE,) * 5 + (NEXT_CYCLE,)
BUSY_TEXT = "The server is busy"


@dataclass
class Options:
    sessions: tuple[int, ...] = (1, 4, 8, 16)
    pair: str = "default"
    client: str = "auto"
    clicks: int = 12  # per session
    think_s: float = 0.5  # pause between a render and the next click (jittered ±50 %)
    timeout_s: float = 300.0  # one click (or page open) longer than this counts as an error
    seed: int = 0


@dataclass
class SessionLog:
    open_s: float | None = None
    clicks: list[tuple[str, float]] = field(default_factory=list)  # (button, seconds)
    asked: list[bool] = field(default_factory=list)  # per click (browser client): it waited for the server
    errors: list[str] = field(default_factory=list)
    busy_clicks: int = 0


# ---------------------------------------------------------------- the server ----------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(pair: str, env_extra: dict[str, str] | None = None, ready_s: float = 180) -> tuple[Any, str]:
    """`streamlit run app.py` on a free port; returns (process, base url) once it answers."""
    port = free_port()
    env = dict(os.environ, SPECVIZ_PAIR=pair, STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", **(env_extra or {}))
    cmd = [sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"), "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + ready_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    stop_server(proc)
    raise RuntimeError(f"streamlit did not answer within {ready_s:.0f} s")


def stop_server(proc: Any) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


class RssSampler:
    """Peak resident memory of the server process (and its children), sampled in a thread."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.every_s = every_s
        self.peak_mb = self.now_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now_mb(self) -> float:
        total = 0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except Exception:  # a child that just ended
                pass
        return total / 2**20

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.peak_mb = max(self.peak_mb, self.now_mb())
            except Exception:
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)


class CpuSampler:
    """CPU seconds spent while the sessions ran, split between the server (its process tree) and
    the headless Chromium processes: on one machine the clients' drawing competes with the
    server's decoding, and the split says which of the two the cores went to."""

    def __init__(self, server_pid: int, every_s: float = 0.5) -> None:
        import psutil

        self.server = psutil.Process(server_pid)
        self.every_s = every_s
        self.seen: dict[int, tuple[str, float, float]] = {}  # pid -> (kind, CPU seconds at start, latest)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        server = {self.server.pid, *(c.pid for c in self.server.children(recursive=True))}
        for proc in psutil.process_iter(["name"]):
            try:
                kind = "server" if proc.pid in server else "chromium" if "chrom" in (proc.info["name"] or "") else None
                if kind is None:
                    continue
                t = proc.cpu_times()
                cpu = t.user + t.system
                first = self.seen.get(proc.pid, (kind, cpu, cpu))[1]
                self.seen[proc.pid] = (kind, first, cpu)
            except Exception:  # a process that just ended
                pass

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sample()

    def seconds(self, kind: str) -> float:
        return sum(last - first for k, first, last in self.seen.values() if k == kind)


# ---------------------------------------------------------------- websocket client ---------------


class WsClient:
    """One browser session, spoken in Streamlit's own protocol (no browser)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.ws_url = url.replace("http://", "ws://") + "/_stcore/stream"
        self.timeout_s = timeout_s
        self.ws: Any = None
        self.buttons: dict[str, str] = {}  # label -> widget id
        self.disabled: dict[str, bool] = {}

    async def __aenter__(self) -> WsClient:
        from websockets.asyncio.client import connect

        self.ws = await connect(self.ws_url, subprotocols=["streamlit"], max_size=None, open_timeout=60)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.ws.close()

    async def run(self, trigger: str | None = None) -> dict[str, Any]:
        """One script run (the page's first, or a click on the button labelled `trigger`);
        returns what the run drew that matters here. Raises TimeoutError past the timeout."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ClientState_pb2 import ClientState
        from streamlit.proto.WidgetStates_pb2 import WidgetState, WidgetStates

        states = WidgetStates()
        if trigger is not None:
            states.widgets.append(WidgetState(id=self.buttons[trigger], trigger_value=True))
        msg = BackMsg(rerun_script=ClientState(query_string="", widget_states=states, page_script_hash=""))
        await self.ws.send(msg.SerializeToString())
        return await asyncio.wait_for(self._until_finished(), self.timeout_s)

    async def _until_finished(self) -> dict[str, Any]:
        from streamlit.proto.Alert_pb2 import Alert
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        seen: dict[str, Any] = {"exceptions": [], "errors": [], "busy": False}
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await self.ws.recv())
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                which = el.WhichOneof("type")
                if which == "button":
                    self.buttons[el.button.label] = el.button.id
                    self.disabled[el.button.label] = el.button.disabled
                elif which == "exception":
                    seen["exceptions"].append(f"{el.exception.type}: {el.exception.message}")
                elif which == "alert":
                    if BUSY_TEXT in el.alert.body:
                        seen["busy"] = True
                    elif el.alert.format == Alert.ERROR:
                        seen["errors"].append(el.alert.body)
            elif kind == "script_finished":
                if fwd.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    continue  # a rerun follows at once (Streamlit queued it): wait for that one
                return seen


async def ws_session(url: str, opts: Options, rng: random.Random, log: SessionLog) -> None:
    try:
        async with WsClient(url, opts.timeout_s) as client:
            t0 = time.perf_counter()
            first = await client.run()
            log.open_s = time.perf_counter() - t0
            _record_page(log, first)
            if NEXT_PHASE not in client.buttons:
                log.errors.append("the page has no Next phase button")
                return
            for i in range(opts.clicks):
                await asyncio.sleep(opts.think_s * rng.uniform(0.5, 1.5))
                button = PATTERN[i % len(PATTERN)]
                t0 = time.perf_counter()
                seen = await client.run(trigger=button)
                log.clicks.append((button, time.perf_counter() - t0))
                _record_page(log, seen)
    except TimeoutError:
        log.errors.append(f"no render within {opts.timeout_s:.0f} s")
    except Exception as exc:  # a dropped connection, a protocol error: counted, the others go on
        log.errors.append(f"{type(exc).__name__}: {exc}")


def _record_page(log: SessionLog, seen: dict[str, Any]) -> None:
    log.errors.extend(f"exception on the page: {e}" for e in seen["exceptions"])
    log.errors.extend(f"error box: {e[:160]}" for e in seen["errors"])
    log.busy_clicks += bool(seen["busy"])


# ---------------------------------------------------------------- browser client -----------------


async def browser_sessions(url: str, n: int, opts: Options, logs: list[SessionLog]) -> None:
    """N pages in one headless Chromium; "rendered" = Streamlit's running indicator is gone."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            rngs = [random.Random(opts.seed * 1000 + i) for i in range(n)]
            await asyncio.gather(*(_browser_session(browser, url, opts, rngs[i], logs[i]) for i in range(n)))
        finally:
            await browser.close()


async def _browser_session(browser: Any, url: str, opts: Options, rng: random.Random, log: SessionLog) -> None:
    page = await browser.new_page(viewport={"width": 1400, "height": 1800})
    page.set_default_timeout(opts.timeout_s * 1000)
    page.on("pageerror", lambda e: log.errors.append(f"page error: {e}"))
    try:
        t0 = time.perf_counter()
        await page.goto(url, wait_until="domcontentloaded")
        await page.get_by_role("button", name=NEXT_PHASE).wait_for()
        await _browser_idle(page, opts)
        log.open_s = time.perf_counter() - t0
        for i in range(opts.clicks):
            await asyncio.sleep(opts.think_s * rng.uniform(0.5, 1.5))
            button = PATTERN[i % len(PATTERN)]
            # Timed in the page, from the click to the first frame showing the new step: what a student
            # sees, without the test driver's round trips (on shared cores those are slow).
            key = "next_phase" if button == NEXT_PHASE else "next_cycle"
            await page.wait_for_function(READY_JS, arg=key, timeout=opts.timeout_s * 1000)  # a re-run may redraw
            got = await page.evaluate(PAINT_JS, [key, opts.timeout_s * 1000])
            if "error" in got:
                raise TimeoutError(got["error"])
            busy = bool(await page.get_by_text(BUSY_TEXT).count())
            log.clicks.append((button, got["painted"] / 1000))
            log.asked.append(bool(got["asked"]))
            log.busy_clicks += busy
            if await page.locator("[data-testid='stException']").count():
                log.errors.append("exception on the page")
    except Exception as exc:
        log.errors.append(f"{type(exc).__name__}: {exc}"[:200])
        try:  # what the stage was doing: its state and its last messages both ways (stage_transport.js `note`)
            log.errors.append("stage: " + json.dumps(await page.evaluate(STAGE_STATE_JS))[:4000])
        except Exception:
            pass
    finally:
        await page.close()


STAGE_STATE_JS = """() => { const s = window.__specvizStage && window.__specvizStage.state; if (!s) return null;
  const said = [...document.querySelectorAll(".svs-notice, [data-testid='stAlert'], [data-testid='stToast']")]
    .map(e => e.textContent.trim()).filter(t => t);
  return {cur: s.cur, seq: s.seq, waiting: s.waiting, queue: s.queue, pending: s.pending, said,
          answered: s.data && s.data.answered, view: s.data && s.data.view, log: s.log}; }"""


READY_JS = """(key) => !!document.querySelector('.svs') && !!window.__specvizStage
  && !!document.querySelector('.st-key-' + key + ' button')"""

# One click, in the page: the stage button is clicked from the page itself, and the promise resolves
# at the first animation frame after the one in which the stage shows another step and waits for no
# answer from the server (bench/browser_latency.py's "painted").
PAINT_JS = """([key, timeoutMs]) => new Promise(resolve => {
  const root = document.querySelector('.svs'), stage = window.__specvizStage;
  const btn = document.querySelector('.st-key-' + key + ' button');
  if (!root || !stage || !btn) { resolve({error: 'no stage or no button ' + key}); return; }
  const title0 = root.dataset.title;
  let seen = false;
  const t0 = performance.now();
  btn.click();
  const asked = stage.state.waiting;  // the step was not in the browser: the click waits for the server
  function tick() {
    const now = performance.now();
    if (seen) { resolve({painted: now - t0, asked}); return; }
    seen = root.dataset.title !== title0 && !stage.state.waiting;
    if (now - t0 > timeoutMs) { resolve({error: 'no paint within ' + timeoutMs + ' ms'}); return; }
    requestAnimationFrame(tick);
  }
  requestAnimationFrame(tick);
})"""


async def _browser_idle(page: Any, opts: Options) -> bool:
    """Wait for the run a click started to end; True if the busy message showed meanwhile."""
    status = "[data-testid='stStatusWidget']"
    try:  # the indicator appears shortly after a run starts; a very fast run may never show it
        await page.wait_for_selector(status, state="attached", timeout=400)
    except Exception:
        pass
    busy = False
    deadline = time.perf_counter() + opts.timeout_s
    while await page.locator(status).count():
        busy = busy or bool(await page.get_by_text(BUSY_TEXT).count())
        if time.perf_counter() > deadline:
            raise TimeoutError(f"no render within {opts.timeout_s:.0f} s")
        await asyncio.sleep(0.05)
    return busy


# ---------------------------------------------------------------- one N, and all of them --------


def pick_client(client: str) -> str:
    if client == "auto":
        return "browser" if Path(CHROMIUM).exists() else "ws"
    if client == "browser" and not Path(CHROMIUM).exists():
        raise SystemExit(f"--client browser needs {CHROMIUM} (Debian's chromium); use --client ws")
    return client


def run_n(n: int, opts: Options, client: str, say: Any = print) -> dict[str, Any]:
    proc, url = start_server(opts.pair)
    try:
        sampler = RssSampler(proc.pid)
        asyncio.run(_warm_up(url, opts))  # loads the pair once, outside the measurement
        rss_idle = sampler.now_mb()
        logs = [SessionLog() for _ in range(n)]
        t0 = time.perf_counter()
        with sampler, CpuSampler(proc.pid) as cpu:
            if client == "browser":
                asyncio.run(browser_sessions(url, n, opts, logs))
            else:
                asyncio.run(_ws_all(url, n, opts, logs))
        wall = time.perf_counter() - t0
        rss_end = sampler.now_mb()
    finally:
        stop_server(proc)
    row = summarize(n, logs, wall)
    row.update(
        rss_after_start_mb=rss_idle,
        rss_peak_mb=sampler.peak_mb,
        rss_end_mb=rss_end,
        server_cores=cpu.seconds("server") / wall,
        browser_cores=cpu.seconds("chromium") / wall,
    )
    say(
        f"N={n}: next phase p50 {_fmt(row['next_phase']['p50_s'])} p95 {_fmt(row['next_phase']['p95_s'])}, "
        f"next cycle p50 {_fmt(row['next_cycle']['p50_s'])}, errors {row['errors']}, "
        f"busy {row['busy_clicks']}, RSS peak {sampler.peak_mb:.0f} MB, cores used: server "
        f"{row['server_cores']:.2f}, browsers {row['browser_cores']:.2f}"
    )
    return row


async def _warm_up(url: str, opts: Options) -> None:
    async with WsClient(url, max(opts.timeout_s, 600)) as client:
        await client.run()


async def _ws_all(url: str, n: int, opts: Options, logs: list[SessionLog]) -> None:
    async def one(i: int) -> None:
        rng = random.Random(opts.seed * 1000 + i)
        await asyncio.sleep(rng.uniform(0, 1.0))  # students do not click in the same millisecond
        await ws_session(url, opts, rng, logs[i])

    await asyncio.gather(*(one(i) for i in range(n)))


def summarize(n: int, logs: list[SessionLog], wall_s: float) -> dict[str, Any]:
    clicks = [c for log in logs for c in log.clicks]
    # (button, seconds, waited for the server), paired within each session: the browser client's
    # clicks (the ws client records no `asked`).
    timed = [(b, s, a) for log in logs for (b, s), a in zip(log.clicks, log.asked, strict=False)]
    return {
        "sessions": n,
        "open": percentiles([log.open_s for log in logs if log.open_s is not None]),
        "next_phase": percentiles([s for b, s in clicks if b == NEXT_PHASE]),
        # Next phase clicks the browser answered itself (the step was there), and how many waited for
        # the server (the prefetch had not kept up): the p95 above is over all of them.
        "next_phase_local": percentiles([s for b, s, a in timed if b == NEXT_PHASE and not a]),
        "asked": {button: sum(1 for b, _, a in timed if b == button and a) for button in (NEXT_PHASE, NEXT_CYCLE)},
        "next_cycle": percentiles([s for b, s in clicks if b == NEXT_CYCLE]),
        "clicks": len(clicks),
        "every_click_s": [(b, round(t, 3)) for b, t in clicks],
        "errors": sum(len(log.errors) for log in logs),
        "error_samples": [e for log in logs for e in log.errors][:5],
        "busy_clicks": sum(log.busy_clicks for log in logs),
        "wall_s": wall_s,
    }


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def percentiles(values: Sequence[float], names: Sequence[str] = ("p50_s", "p95_s", "max_s")) -> dict[str, Any]:
    """n, then the median, p95 and max of `values` under `names` (None when there are none)."""
    xs = sorted(values)
    got = (statistics.median(xs), _quantile(xs, 0.95), xs[-1]) if xs else (None, None, None)
    return {"n": len(xs), **dict(zip(names, got, strict=True))}


def server_env() -> dict[str, str]:
    """The SPECVIZ_* settings of this environment (they reach a served app), for the report."""
    return {k: os.environ[k] for k in sorted(os.environ) if k.startswith("SPECVIZ_")}


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f} s"


def run(opts: Options, say: Any = print) -> dict[str, Any]:
    client = pick_client(opts.client)
    say(f"load: {client} clients on the {opts.pair} pair, N = {', '.join(map(str, opts.sessions))}")
    rows = [run_n(n, opts, client, say) for n in opts.sessions]
    return {"client": client, "pair": opts.pair, "clicks_per_session": opts.clicks, "think_s": opts.think_s,
            "pattern": list(PATTERN), "server_env": server_env(), "cores": os.cpu_count(), "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    """The load table for docs/benchmarks.md."""
    lines = [
        "## Load: concurrent sessions on one server",
        "",
        f"`python -m bench.load` — {result['client']} clients on the {result['pair']} pair, each clicking "
        f"{result['clicks_per_session']} times ({' → '.join(dict.fromkeys(result['pattern']))} in the pattern "
        f"5 × Next phase, 1 × Next cycle), {result['think_s']} s think time; one fresh `streamlit run` per N on "
        f"{result['cores']} cores. Click-to-rendered times"
        + (
            " end at the server's `script_finished` (the wire, not the browser's drawing)."
            if result["client"] == "ws"
            else " are timed in the page, from the click to the first frame that shows the new step (a step "
            "the browser has is shown locally; one it lacks waits for the server's answer)."
        ),
        "",
        "| N | Next phase p50 | p95 | max | Next cycle p50 | p95 | open p50 | errors | busy clicks "
        "| RSS after start | RSS peak | cores: server | cores: browsers |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['sessions']} | {_fmt(r['next_phase']['p50_s'])} | {_fmt(r['next_phase']['p95_s'])} | "
            f"{_fmt(r['next_phase']['max_s'])} | "
            f"{_fmt(r['next_cycle']['p50_s'])} | {_fmt(r['next_cycle']['p95_s'])} | {_fmt(r['open']['p50_s'])} | "
            f"{r['errors']} | {r['busy_clicks']} / {r['clicks']} | {r['rss_after_start_mb']:.0f} MB | "
            f"{r['rss_peak_mb']:.0f} MB | {r.get('server_cores', 0):.2f} | {r.get('browser_cores', 0):.2f} |"
        )
    if any(r.get("next_phase_local", {}).get("n") for r in result["rows"]):
        lines += [
            "",
            "Next phase clicks the browser answered itself (the step was there) and the clicks that "
            "waited for the server (its prefetch had not kept up):",
            "",
        ]
        lines += [
            f"- N = {r['sessions']}: local Next phase p50 {_fmt(r['next_phase_local']['p50_s'])}, p95 "
            f"{_fmt(r['next_phase_local']['p95_s'])}, max {_fmt(r['next_phase_local']['max_s'])} "
            f"({r['next_phase_local']['n']} clicks); waited for the server: {r['asked'][NEXT_PHASE]} Next phase, "
            f"{r['asked'][NEXT_CYCLE]} Next cycle"
            for r in result["rows"]
            if r.get("next_phase_local")
        ]
    if result["server_env"]:
        lines += ["", "Server settings: " + ", ".join(f"`{k}={v}`" for k, v in result["server_env"].items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,4,8,16", help="comma-separated N values")
    ap.add_argument("--pair", default="default", choices=["default", "tiny"])
    ap.add_argument("--client", default="auto", choices=["auto", "ws", "browser"])
    ap.add_argument("--clicks", type=int, default=Options.clicks, help="clicks per session")
    ap.add_argument("--think", type=float, default=Options.think_s, help="seconds between clicks (jittered)")
    ap.add_argument("--timeout", type=float, default=Options.timeout_s, help="seconds before a click is an error")
    ap.add_argument("--json", type=Path, help="also write the result as JSON here")
    ap.add_argument("--into", type=Path,
                    help="a docs directory: put the table into its benchmarks.md and the result into benchmarks.json")
    args = ap.parse_args(argv)
    opts = Options(sessions=tuple(int(x) for x in args.sessions.split(",") if x.strip()), pair=args.pair,
                   client=args.client, clicks=args.clicks, think_s=args.think, timeout_s=args.timeout)
    result = run(opts)
    separate.publish("load", markdown(result), result, args.json, args.into)
    return 0 if all(r["errors"] == 0 for r in result["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
