"""A class joining a live lecture at once, over HTTP (issue 35, part 7). Not a test.

`python -m bench.live_join [--students 200] [--over 250] [--bound 5]` starts the real app
(`streamlit run`, the tiny pair) on a free port; a headless Chromium lecturer page starts a live
lecture (as `bench.live` does). Then `--students` threads post `{"do": "join"}` to the room's route
(`ui/live_route.py`) at the same instant (a barrier), each on its own connection, as a class's phones
would after the code goes up on the screen. While they are in flight the lecturer clicks Next phase
three times (Playwright's actionable click), and each click is timed to the lecturer's own paint and
to a follower's long poll answering with that step (`bench.live.ProtocolFollower`: the lecturer's
report went through the server while the class joined); a thread asks the server's health endpoint
every 100 ms. A second burst
of `--over` joins then pushes the room past its cap (`room.MAX_STUDENTS`): each join must answer 200,
or 429 with the room's message.

Per burst it reports each join's answer time (p50 / p95 / max), the statuses, whether every join
answered within `--bound` seconds, the lecturer's click → paint and → a follower during the burst, the health
endpoint's answer times and the server's CPU seconds. The clients share the machine's cores with
the server (one Python process of threads and a Chromium): the times are an upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

from bench.common import cpu_name
from bench.live import LIVE, ProtocolFollower, lecturer_page
from bench.load import CHROMIUM, CHROMIUM_ARGS, CpuSampler, percentiles, start_server, stop_server

FULL = "this room is full"  # the start of the room's 429 message (specviz.room.Room.join)
JOIN = {"do": "join"}


def post(url: str, message: dict[str, Any] = JOIN, timeout_s: float = 60.0) -> tuple[int, str, float]:
    """One call of the room's route: (status, the student key, the view's key or the error, seconds
    to the whole answer)."""
    req = urllib.request.Request(url, data=json.dumps(message).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            status, body = r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        status, body = e.code, json.loads(e.read() or b"{}")
    except OSError as e:  # refused, reset, timed out: the server did not answer
        return 0, f"{type(e).__name__}: {e}", time.perf_counter() - t0
    return status, body.get("student") or body.get("key") or body.get("error", ""), time.perf_counter() - t0


def burst(url: str, n: int, messages: Any = None) -> tuple[list[tuple[int, str, float]], threading.Thread]:
    """`n` calls (joins, or `messages[i]`) released at one instant; returns their results (filled as
    they end) and a thread to join for all of them."""
    results: list[tuple[int, str, float]] = []
    gate = threading.Barrier(n + 1)
    lock = threading.Lock()

    def one(i: int) -> None:
        gate.wait()
        got = post(url, JOIN if messages is None else messages[i])
        with lock:
            results.append(got)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()

    def wait_all() -> None:
        for t in threads:
            t.join()

    gate.wait()  # released: every thread posts now
    waiter = threading.Thread(target=wait_all, daemon=True)
    waiter.start()
    return results, waiter


class Health(threading.Thread):
    """The server's health endpoint asked every 100 ms: how long each answer took (None: no answer)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.times, self.stop = f"{url}/_stcore/health", [], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    r.read()
                self.times.append(time.perf_counter() - t0)
            except OSError:
                self.times.append(None)


def lecturer_clicks(page: Any, clicks: int) -> list[tuple[int, float, float]]:
    """Next phase `clicks` times during a burst: (step, the click's time (epoch s, the page's clock),
    click to the lecturer's own paint in s)."""
    out = []
    for _ in range(clicks):
        step = page.evaluate("window.__specvizStage.state.cur") + 1
        page.locator(".st-key-next_phase button").first.click()
        page.wait_for_function(f"window.__specvizStage.state.cur === {step}", timeout=60_000)
        c, t = page.evaluate(f"""() => {{ const c = window.__clicks[window.__clicks.length - 1];
            const p = window.__paints.find(([s, at]) => s === {step} && at >= c); return [c, p ? p[1] : c]; }}""")
        out.append((step, c / 1000, (t - c) / 1000))
        time.sleep(0.3)
    return out


def measure(lecturer: Any, room_url: str, url: str, n: int, bound_s: float, server_pid: int) -> dict[str, Any]:
    health, follower = Health(url), ProtocolFollower(room_url)  # the room's long poll, as a follower's page
    health.start()
    follower.start()
    with CpuSampler(server_pid) as cpu:
        t0 = time.perf_counter()
        results, waiter = burst(room_url, n)
        clicks = lecturer_clicks(lecturer, 3)
        waiter.join(120)
        wall = time.perf_counter() - t0
        time.sleep(1.0)  # the follower's answer to the last click
    health.stop.set()
    follower.stop.set()
    health.join(5)
    to_room = [follower.seen[step] - at if step in follower.seen else None for step, at, _ in clicks]
    statuses = Counter(s for s, _, _ in results)
    answered = [t for s, _, t in results if s]
    refused = [m for s, m, _ in results if s == 429]
    keys = {m for s, m, _ in results if s == 200}
    answers = [t for t in health.times if t is not None]
    return {"joins": n, "statuses": dict(statuses), "distinct_keys": len(keys), **percentiles(answered),
            "within_bound": len(answered) == n and max(answered) <= bound_s, "bound_s": bound_s,
            "cap_message": all(m.startswith(FULL) for m in refused), "burst_wall_s": wall,
            "lecturer_click_s": [paint for _, _, paint in clicks], "click_to_follower_s": to_room,
            "health_p50_s": statistics.median(answers) if answers else None,
            "health_max_s": max(answers) if answers else None, "health_missed": health.times.count(None),
            "server_cpu_s": cpu.seconds("server"), "results": results}


def views(room_url: str, students: list[str], tab: str, server_pid: int) -> dict[str, Any]:
    """Every student asks for the open tab's view of the lecturer's step at one instant (a class
    following with the tab open): the room builds it once (`ui/live_route`); each answer's time."""
    room = json.loads(urllib.request.urlopen(urllib.request.Request(
        room_url, data=json.dumps({"do": "here", "student": students[0], "since": -1}).encode(), method="POST",
        headers={"Content-Type": "application/json"}), timeout=30).read())
    asks = [{"do": "view", "student": s, "run": room["run"], "step": room["step"], "tab": tab} for s in students]
    with CpuSampler(server_pid) as cpu:
        results, waiter = burst(room_url, len(asks), asks)
        waiter.join(120)
    answered = [t for st, _, t in results if st == 200]
    shown = sorted({k for st, k, _ in results if st == 200})  # one: every student was sent the same view
    return {"tab": tab, "asks": len(asks), "step": room["step"], "views": shown,
            "statuses": dict(Counter(st for st, _, _ in results)), **percentiles(answered),
            "server_cpu_s": cpu.seconds("server")}


def run(students: int, over: int, bound_s: float, say: Any = print) -> list[dict[str, Any]]:
    from playwright.sync_api import sync_playwright

    proc, url = start_server("tiny", ready_s=120)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            lecturer, code = lecturer_page(browser, url)
            room_url = f"{url}{LIVE}/{code}"
            rows, keys = [], []
            for n in (students, over):
                row = measure(lecturer, room_url, url, n, bound_s, proc.pid)
                keys = keys or [k for s, k, _ in row["results"] if s == 200]  # the first burst's students
                del row["results"]
                say(f"  {json.dumps(row)}")
                rows.append(row)
            for tab in ("charts", "stats"):
                rows.append(views(room_url, keys, tab, proc.pid))
                say(f"  {json.dumps(rows[-1])}")
            browser.close()
        return rows
    finally:
        stop_server(proc)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "## A class joining at once: concurrent joins over HTTP",
        "",
        f"`python -m bench.live_join` on {cpu_name()} ({os.cpu_count()} cores), the tiny pair, one `streamlit run`. "
        "A burst of concurrent `POST {\"do\": \"join\"}` to the room's route (threads released by a barrier, one "
        "connection each), then a second burst past the room's cap of 400 students; meanwhile the lecturer's page "
        "clicks Next phase 3 times (each timed to its own paint and to a follower's long poll showing the step) and "
        "the health endpoint is asked every 100 ms.",
        "",
        "| joins in the burst | answered 200 / 429 / none | join answer p50 / p95 / max | all within | lecturer's "
        "click → own paint | click → a follower | health p50 / max | server CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in (r for r in rows if "joins" in r):
        s = r["statuses"]
        clicks = " / ".join(f"{1000 * c:.0f}" for c in r["lecturer_click_s"]) + " ms"
        room = " / ".join("none" if c is None else f"{1000 * c:.0f}" for c in r["click_to_follower_s"]) + " ms"
        lines.append(
            f"| {r['joins']} | {s.get(200, 0)} / {s.get(429, 0)} / {r['joins'] - s.get(200, 0) - s.get(429, 0)} | "
            f"{r['p50_s']:.2f} / {r['p95_s']:.2f} / {r['max_s']:.2f} s | {r['bound_s']:.0f} s: "
            f"{'yes' if r['within_bound'] else 'no'} | {clicks} | {room} | {1000 * r['health_p50_s']:.0f} / "
            f"{1000 * r['health_max_s']:.0f} ms | {r['server_cpu_s']:.1f} s |")
    lines += ["", "Then each student of the first burst asks, at one instant, for a tab's view of the lecturer's step "
              "(`do: view`, a class following with the tab open):", "",
              "| tab | asks | answered 200 | distinct views | answer p50 / p95 / max | server CPU |",
              "|---|---|---|---|---|---|"]
    for r in (r for r in rows if "tab" in r):
        lines.append(f"| {r['tab']} | {r['asks']} | {r['statuses'].get(200, 0)} | {len(r['views'])} | "
                     f"{r['p50_s']:.2f} / {r['p95_s']:.2f} / {r['max_s']:.2f} s | {r['server_cpu_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=200, help="joins in the first burst")
    ap.add_argument("--over", type=int, default=250, help="joins in the second burst (past the room's cap)")
    ap.add_argument("--bound", type=float, default=5.0, help="seconds every join must answer within")
    ap.add_argument("--out", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = run(args.students, args.over, args.bound)
    if args.out:
        from pathlib import Path

        Path(args.out).write_text(json.dumps({"cpu": cpu_name(), "rows": rows}, indent=1))
    print(markdown(rows))
    ok = all(r["within_bound"] and r["cap_message"] and None not in r["click_to_follower_s"]
             for r in rows if "joins" in r) and all(r["statuses"] == {200: r["asks"]} for r in rows if "tab" in r)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
