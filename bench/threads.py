"""Choosing torch's thread count, once, for the whole run.

On a 2-core machine shared with other jobs, more threads is not always faster: with OpenMP's
default (active) waiting, a matmul split over 2 threads stalls whenever the other thread is
descheduled — measured here under load: a [5, 576] x [576, 1536] matmul took ~32 ms on 2 threads
and 0.2 ms on 1, which made a 5-token verify pass 4x slower than a 1-token decode step. The probe
times the target's 1-token decode and 5-token verify forward at each candidate thread count
(interleaved) and the suite then uses the fastest count for *every* measurement (`--threads N`
skips the probe). Both the probe and the choice go into the report.
"""

from __future__ import annotations

import time
from typing import Any

import torch

try:  # the engine's one forward into a specviz cache (moved to runtime.py in a refactor)
    from specviz.runtime import forward
except ImportError:
    from specviz.engine import forward
from specviz.kv import create_cache

from .common import Log, median


def _forward_ms(model: Any, cache: Any, n: int) -> float:
    length = cache.get_seq_length()
    t0 = time.perf_counter()
    forward(model, cache, list(range(100, 100 + n)), "probe", last_only=(n == 1))
    dt = time.perf_counter() - t0
    cache.truncate(length, "rollback")
    return 1000 * dt


def probe(pair: Any, prompt: list[int], candidates: list[int], reps: int, log: Log) -> dict[str, Any]:
    model = pair.target
    cache = create_cache(model, "contiguous", max_len=len(prompt) + 16)
    forward(model, cache, prompt[:-1], "prefill", last_only=True)
    got: dict[int, dict[str, list[float]]] = {n: {"decode_ms": [], "verify5_ms": []} for n in candidates}
    for r in range(reps):
        for n in candidates if r % 2 == 0 else list(reversed(candidates)):
            torch.set_num_threads(n)
            _forward_ms(model, cache, 1)  # let the thread pool settle at its new size
            got[n]["decode_ms"].append(_forward_ms(model, cache, 1))
            got[n]["verify5_ms"].append(_forward_ms(model, cache, 5))
    table = {n: {k: median(v) for k, v in m.items()} for n, m in got.items()}
    chosen = min(candidates, key=lambda n: table[n]["decode_ms"] + table[n]["verify5_ms"])
    torch.set_num_threads(chosen)
    log(f"threads: probe {table} -> using {chosen}")
    return {"candidates": table, "chosen": chosen, "how": "probe"}
