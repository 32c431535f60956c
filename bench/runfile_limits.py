"""Run files against crafted sizes (issue 33, parts 2 and 4). Not a test.

`python -m bench.runfile_limits` measures, on the tiny pair's recorded runs and the golden tree run:

* **A small file claiming a billion positions**: one cycle whose first snapshot says `seq_len`
  1e9 (the file is ~15 KB): how long `load_run` takes to refuse it, and the memory it traced.
* **A 50 MB file**: how long `load_run` takes to refuse it (from its size, before parsing).
* **The largest pool the caps allow**: every snapshot of a 3-cycle run claims a block id at
  MAX_POSITIONS and a pool of that many blocks (within the schema's caps, so it loads): its
  standalone page against the honest run's (time, traced memory peak, cells drawn, bytes).
* **Another session while an 8 MB file is read**: the golden tree run's cycles repeated up to just
  under MAX_RUN_BYTES; a thread ticking every 5 ms stands for another session, and its longest
  pause while `load_run` reads the file is the delay another session's click could see.

Each figure depends on the machine and on what else runs on it: the report names the CPU count.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # the tests' crafted runs (tests/hostile_runs.py)

from hostile_runs import tiny_record, with_value  # noqa: E402

from specviz.run_schema import MAX_POSITIONS  # noqa: E402
from specviz.runfile import MAX_RUN_BYTES, RunFileError, load_run  # noqa: E402
from specviz.viz.standalone import run_html  # noqa: E402


def measured(work: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result or the RunFileError, ms, traced peak MB)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = work()
    except RunFileError as err:
        out = err
    ms = (time.perf_counter() - t0) * 1000
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, ms, peak


def billion_positions() -> None:
    data = with_value(json.loads(tiny_record().to_json()), ("traces", 0, "snapshots", 0, "target", "seq_len"), 10**9)
    data["traces"] = data["traces"][:1]
    text = json.dumps(data)
    err, ms, peak = measured(lambda: load_run(text))
    print(f"seq_len 1e9 in a {len(text):,} B file: {ms:.1f} ms, {peak:.2f} MB traced -> {err}")
    big = b'{"format": "specviz-run", "traces": [' + b" " * (50 * 2**20) + b"]}"
    err, ms, _ = measured(lambda: load_run(big))
    print(f"a {len(big) / 2**20:.0f} MB file: {ms:.3f} ms -> {err}")


def claimed_pool() -> None:
    honest = tiny_record()
    data = json.loads(honest.to_json())
    snaps = [s for s in data["prefill"] if s]
    snaps += [s for t in data["traces"] for ph in t["snapshots"] for s in (ph["target"], ph["draft"]) if s]
    for snap in snaps:
        snap.update(block_table=[*snap["block_table"], MAX_POSITIONS], capacity=MAX_POSITIONS,
                    max_capacity=MAX_POSITIONS, num_blocks=MAX_POSITIONS)  # fmt: skip
    text = json.dumps(data)
    for name, record in (("honest", honest), ("claiming the cap", load_run(text))):
        page, ms, peak = measured(lambda r=record: run_html(r))
        cells = len(re.findall(r"class='svkv-cell svkv-s-", page))
        print(f"standalone page, {name}: {ms:.0f} ms, {peak:.1f} MB traced, {cells:,} cells, {len(page):,} B")


def other_session_pause() -> None:
    data = json.loads((REPO / "tests" / "golden" / "feature-tree.run.json").read_text())
    cycles = data["traces"]
    while len(json.dumps(data)) < MAX_RUN_BYTES - 300_000:
        data["traces"] = data["traces"] + cycles
    text = json.dumps(data)
    gaps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    record = load_run(text)
    ms = (time.perf_counter() - t0) * 1000
    stop.set()
    ticker.join()
    print(f"an {len(text) / 2**20:.1f} MB file ({len(record.traces)} cycles): load_run {ms:.0f} ms; "
          f"another thread's longest pause {max(gaps) * 1000:.0f} ms")  # fmt: skip


def main() -> None:
    print(f"{os.cpu_count()} CPUs")
    billion_positions()
    claimed_pool()
    other_session_pause()


if __name__ == "__main__":
    main()
