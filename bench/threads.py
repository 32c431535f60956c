"""Choosing torch's thread count, once, for the whole run.

On a machine shared with other jobs, more threads is not always faster: with OpenMP's default
(active) waiting, a matmul split over 2 threads stalls whenever the other thread is descheduled.
So the probe times the target's 1-token decode and 5-token verify forward at each candidate
thread count (interleaved) and the suite then uses the fastest count for *every* measurement
(`--threads N` skips the probe). Both the probe and the choice go into the report.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from specviz.kv import create_cache
from specviz.runtime import forward

from .common import Log, median
from .paging import forward_ms


def probe(pair: Any, prompt: list[int], candidates: list[int], reps: int, log: Log) -> dict[str, Any]:
    model = pair.target
    cache = create_cache(model, "contiguous", max_len=len(prompt) + 16)
    forward(model, cache, prompt[:-1], "prefill", last_only=True)
    timed = functools.partial(forward_ms, cache, model, first=100, phase="probe")
    got: dict[int, dict[str, list[float]]] = {n: {"decode_ms": [], "verify5_ms": []} for n in candidates}
    for r in range(reps):
        for n in candidates if r % 2 == 0 else list(reversed(candidates)):
            torch.set_num_threads(n)
            timed(1)  # let the thread pool settle at its new size
            got[n]["decode_ms"].append(timed(1))
            got[n]["verify5_ms"].append(timed(5))
    table = {n: {k: median(v) for k, v in m.items()} for n, m in got.items()}
    chosen = min(candidates, key=lambda n: table[n]["decode_ms"] + table[n]["verify5_ms"])
    torch.set_num_threads(chosen)
    log(f"threads: probe {table} -> using {chosen}")
    return {"candidates": table, "chosen": chosen, "how": "probe"}
