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
import statistics
import time
from typing import Any

import torch

from specviz import SpeculativeDecoder

from .app_step import build_figures
from .common import REPO, Log, Settings
from .systems import spec_config

TOP = 14


# Where own time goes, by group (substring of the function's file or name -> group label).
PY_GROUPS = {
    "plotly object model (validation, property paths)": ("plotly/", "_plotly_utils/", "copy.py"),
    "model matmuls (torch linear)": ("torch._C._nn.linear",),
    "sampling (torch.multinomial)": ("torch.multinomial",),
    "specviz bookkeeping (kv, engine, trace)": ("specviz/",),
}
OP_GROUPS = {
    "matmuls (aten::mm/addmm/bmm)": ("aten::mm", "aten::addmm", "aten::bmm"),
    "sampling draws (aten::exponential_, multinomial)": ("aten::exponential_", "aten::multinomial"),
    "paged gather/scatter (index_select, index_copy_)": ("aten::index_select", "aten::index_copy"),
    "attention (sdpa)": ("scaled_dot_product",),
}


def _shares(rows: list[tuple[str, float]], groups: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    total = sum(ms for _, ms in rows)
    out: dict[str, Any] = {"total_own_ms": total}
    for label, keys in groups.items():
        ms = sum(v for name, v in rows if any(k in name for k in keys))
        out[label] = {"own_ms": ms, "share": ms / total if total else None}
    return out


def _python_rows(prof: cProfile.Profile) -> list[dict[str, Any]]:
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        short = file.split("site-packages/")[-1].split(str(REPO) + "/")[-1]
        rows.append({"function": f"{short}:{line}({func})", "calls": nc, "own_ms": 1000 * tt, "cum_ms": 1000 * ct})
    rows.sort(key=lambda r: r["own_ms"], reverse=True)
    return rows


def sample_inverse_cdf(probs: torch.Tensor, generator: torch.Generator) -> int:
    """The proposed replacement for `torch.multinomial(probs, 1)`: one uniform draw and a binary
    search in the float64 CDF. Exact (token i is drawn iff cdf[i-1] <= u < cdf[i], probability
    probs[i]; zero-probability tokens never), but O(V) cheap adds instead of V random numbers."""
    cdf = probs.double().cumsum(-1)
    u = torch.rand((), generator=generator, dtype=torch.float64, device=probs.device) * cdf[-1]
    return int(torch.searchsorted(cdf, u, right=True).clamp_(max=probs.numel() - 1))


def sampling_draws(vocab: int, reps: int = 200) -> dict[str, Any]:
    """ms per draw from a vocab-sized distribution: torch.multinomial (what sampling.sample does)
    vs the inverse CDF, interleaved in blocks of 10."""
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(vocab, generator=gen) * 3, -1)
    times: dict[str, list[float]] = {"multinomial": [], "inverse_cdf": []}
    for _ in range(reps // 10):
        t0 = time.perf_counter()
        for _ in range(10):
            int(torch.multinomial(probs, 1, generator=gen).item())
        t1 = time.perf_counter()
        for _ in range(10):
            sample_inverse_cdf(probs, gen)
        t2 = time.perf_counter()
        times["multinomial"].append(100 * (t1 - t0))  # ms per draw
        times["inverse_cdf"].append(100 * (t2 - t1))
    return {"vocab": vocab, **{k: statistics.median(v) for k, v in times.items()}}


def run(pair: Any, prompt: list[int], s: Settings, log: Log) -> dict[str, Any]:
    n = s.profile_cycles
    log(f"profile: {n} cycles each (cProfile instrumented, torch.profiler lean, figures)")
    out: dict[str, Any] = {"cycles": n}

    dec = SpeculativeDecoder(pair, spec_config(4, 1, 4096, "paged", True))
    dec.start(prompt)
    dec.step()  # warm-up
    traces: list[Any] = []

    def profiled(name: str, work: Any) -> None:
        prof = cProfile.Profile()
        prof.enable()
        work()
        prof.disable()
        rows = _python_rows(prof)
        out[name] = rows[:TOP]
        out[f"{name}_groups"] = _shares([(r["function"], r["own_ms"]) for r in rows], PY_GROUPS)

    profiled("python_cycle", lambda: traces.extend(dec.step() for _ in range(n)))
    profiled("figures", lambda: [build_figures(prompt, traces[:i], dec.token_text, None)
                                 for i in range(1, len(traces) + 1)])

    dec = SpeculativeDecoder(pair, spec_config(4, 1, 4096, "paged", False))
    dec.start(prompt)
    dec.step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tprof:
        for _ in range(n):
            dec.step()
    ops = [{"op": ev.key, "calls": ev.count, "own_ms": ev.self_cpu_time_total / 1000,
            "total_ms": ev.cpu_time_total / 1000} for ev in tprof.key_averages()]
    ops.sort(key=lambda r: r["own_ms"], reverse=True)
    out["torch_ops"] = ops[:TOP]
    out["torch_ops_groups"] = _shares([(r["op"], r["own_ms"]) for r in ops], OP_GROUPS)
    out["sampling_draw_ms"] = sampling_draws(int(pair.target.get_output_embeddings().weight.shape[0]))
    return out
