"""Profiles behind the goals: where a cycle and an app step spend their time.

Three views, each over a few cycles of the default pair at K = 4, temperature 1, paged (the app's
configuration):

* `python_cycle`: cProfile of instrumented cycles (the app's path), top functions by own time —
  the Python overhead that instrumentation and cache bookkeeping add;
* `torch_ops`: torch.profiler of lean cycles, top operators by own CPU time — where the model
  math goes (matmuls, the paged gather, sampling);
* `figures`: cProfile of building the app's figures for those cycles.

Only the top rows are kept; they are what the report's profile findings cite.
"""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

import torch

from specviz import SpeculativeDecoder

from .app_step import build_figures
from .common import REPO, Log, Settings
from .systems import spec_config

TOP = 14


def _top_python(prof: cProfile.Profile, n: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        short = file.split("site-packages/")[-1].split(str(REPO) + "/")[-1]
        rows.append({"function": f"{short}:{line}({func})", "calls": nc, "own_ms": 1000 * tt, "cum_ms": 1000 * ct})
    rows.sort(key=lambda r: r["own_ms"], reverse=True)
    return rows[:n]


def run(pair: Any, prompt: list[int], s: Settings, log: Log) -> dict[str, Any]:
    n = s.profile_cycles
    log(f"profile: {n} cycles each (cProfile instrumented, torch.profiler lean, figures)")
    out: dict[str, Any] = {"cycles": n}

    dec = SpeculativeDecoder(pair, spec_config(4, 1, 4096, "paged", True))
    dec.start(prompt)
    dec.step()  # warm-up
    prof = cProfile.Profile()
    traces = []
    prof.enable()
    for _ in range(n):
        traces.append(dec.step())
    prof.disable()
    out["python_cycle"] = _top_python(prof, TOP)

    prof = cProfile.Profile()
    prof.enable()
    for i in range(1, len(traces) + 1):
        build_figures(prompt, traces[:i], dec.token_text, None)
    prof.disable()
    out["figures"] = _top_python(prof, TOP)

    dec = SpeculativeDecoder(pair, spec_config(4, 1, 4096, "paged", False))
    dec.start(prompt)
    dec.step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tprof:
        for _ in range(n):
            dec.step()
    ops = []
    for ev in tprof.key_averages():
        ops.append(
            {
                "op": ev.key,
                "calls": ev.count,
                "own_ms": ev.self_cpu_time_total / 1000,
                "total_ms": ev.cpu_time_total / 1000,
            }
        )
    ops.sort(key=lambda r: r["own_ms"], reverse=True)
    out["torch_ops"] = ops[:TOP]
    return out
