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


# --------------------------------------------------------------------------- one plain step, profiled

# A one-token step's operators by role (substring of the operator's name -> group label), for
# `step_profile`: the matrix products are what the weights' bytes cost; the rest is what remains.
STEP_GROUPS = {
    "matrix products (linear layers)": ("aten::mm", "aten::addmm", "mkldnn::_linear_pointwise", "aten::bmm"),
    "attention (sdpa)": ("scaled_dot_product",),
    "norms, rotary, activations (elementwise)": ("aten::mul", "aten::add", "aten::pow", "aten::mean", "aten::rsqrt",
                                                 "aten::silu", "aten::neg", "aten::cos", "aten::sin", "aten::div",
                                                 "aten::sub", "aten::to", "aten::_to_copy"),
    "cache writes, copies, concatenation": ("aten::copy_", "aten::cat", "aten::index", "aten::slice_scatter",
                                            "aten::clone", "aten::contiguous", "aten::fill_", "aten::zero_"),
    "views and allocation": ("aten::view", "aten::reshape", "aten::transpose", "aten::slice", "aten::as_strided",
                             "aten::empty", "aten::unsqueeze", "aten::expand", "aten::select", "aten::t",
                             "aten::_unsafe_view", "aten::permute", "aten::arange", "aten::embedding"),
}


def weight_bytes(model: Any) -> int:
    """Bytes a one-token forward streams: every linear's weight (plain or packed copy) once; the
    input embedding reads one row, left out."""
    from specviz.kernels import shape_of

    return sum(shape_of(m).bytes for m in model.modules() if isinstance(m, torch.nn.Linear))


def read_bandwidth(mib: int = 256, reps: int = 7) -> float:
    """GB/s of one thread streaming a `mib` MiB float32 tensor (a sum reads each byte once)."""
    data = torch.ones(mib * 2**20 // 4)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - t0)
    return data.numel() * 4 / statistics.median(times) / 1e9


def step_profile(model: Any, tokens: list[int], past: int = 120, steps: int = 20) -> dict[str, Any]:
    """One-token steps of `model` at `past` cached positions: the wall time (median, unprofiled),
    then torch.profiler's own CPU time per operator group (ms per step), and the floor: the weights'
    bytes over this thread's read bandwidth."""
    from specviz.kv import create_cache
    from specviz.runtime import forward

    cache = create_cache(model, "contiguous", max_len=past + 8, initial_len=past + 8)
    forward(model, cache, tokens[:past], "prefill")

    def one() -> None:
        forward(model, cache, tokens[past : past + 1], "decode")
        cache.truncate(past, "rollback")

    for _ in range(3):
        one()
    wall = []
    for _ in range(steps):
        t0 = time.perf_counter()
        one()
        wall.append(1000 * (time.perf_counter() - t0))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            one()
    ops = [(ev.key, ev.self_cpu_time_total / 1000 / steps) for ev in prof.key_averages()]
    groups = {label: sum(ms for name, ms in ops if any(k in name for k in keys)) for label, keys in STEP_GROUPS.items()}
    groups["everything else (Python-side ops, hooks)"] = sum(ms for _, ms in ops) - sum(groups.values())
    top = sorted(ops, key=lambda r: r[1], reverse=True)[:TOP]
    streamed = weight_bytes(model)
    bandwidth = read_bandwidth()
    return {"wall_ms": statistics.median(wall), "wall_min_ms": min(wall), "profiled_ms": sum(ms for _, ms in ops),
            "groups_ms": groups, "top_ops_ms": top, "weight_bytes": streamed, "read_gb_s": bandwidth,
            "floor_ms": streamed / bandwidth / 1e6, "steps": steps, "past": past}


def step_markdown(result: dict[str, Any]) -> str:
    """The step profile's section: per kernel, where a one-token step's time goes."""
    variants = list(result["by"])
    first = result["by"][variants[0]]
    lines = [
        "## What a one-token step costs outside the matrix products (step_profile)",
        "",
        f"`python -m bench.profiling --step` — {result['target']}, CPU **{result['cpu']}** ({result['cpu_isa']}), "
        f"1 thread, {first['past']} cached positions, {first['steps']} steps per variant. *Wall*: median ms of "
        "unprofiled steps; the groups are torch.profiler's own CPU time per step (the profiler adds its own "
        "overhead, so they sum to more than the wall time). *Floor*: the bytes of weights a step streams ÷ this "
        "thread's read bandwidth (a 256 MiB sum), the time no kernel can beat. Load average "
        f"{', '.join(f'{x:.1f}' for x in result['loadavg_start'])} at the start. {result.get('note', '')}".rstrip(),
        "",
        "| | " + " | ".join(variants) + " |",
        "|---|" + "---:|" * len(variants),
        "| wall ms (min) | " + " | ".join(f"{v['wall_ms']:.1f} ({v['wall_min_ms']:.1f})" for v in result["by"].values())
        + " |",
        "| floor ms (weights MB / read GB/s) | " + " | ".join(_floor(v) for v in result["by"].values()) + " |",
        "| profiled ms | " + " | ".join(f"{v['profiled_ms']:.1f}" for v in result["by"].values()) + " |",
    ]
    for label in first["groups_ms"]:
        lines.append(f"| {label} | " + " | ".join(
            f"{v['groups_ms'][label]:.1f} ({v['groups_ms'][label] / v['profiled_ms']:.0%})"
            for v in result["by"].values()) + " |")
    lines += ["", "Top operators (own ms per step), " + variants[0] + ": " + ", ".join(
        f"`{name}` {ms:.2f}" for name, ms in first["top_ops_ms"][:8]) + ".", ""]
    return "\n".join(lines)


def _floor(v: dict[str, Any]) -> str:
    return f"{v['floor_ms']:.1f} ({v['weight_bytes'] / 1e6:.0f} / {v['read_gb_s']:.1f})"


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.profiling --step [--dtypes float32] [--kernels reference,selected] [--steps 20]
    [--into docs]`: the one-token step profile of the default target, per kernel choice."""
    import argparse
    import os
    from pathlib import Path

    from . import separate, verify_cost
    from .common import cpu_name

    ap = argparse.ArgumentParser(prog="python -m bench.profiling")
    ap.add_argument("--step", action="store_true", help="profile one-token steps of the default target")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--kernels", default="reference,selected")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--into", type=Path)
    ap.add_argument("--note", default="", help="a sentence added to the report (e.g. the machine was shared)")
    args = ap.parse_args(argv)
    if not args.step:
        ap.error("only --step runs on its own (the cycle profiles are the suite's section 6)")
    torch.set_num_threads(1)
    from specviz.kernels import machine

    result: dict[str, Any] = {"cpu": cpu_name(), "cpu_isa": machine()[0], "loadavg_start": os.getloadavg(),
                              "note": args.note, "by": {}}
    for dtype in args.dtypes.split(","):
        for kernel in args.kernels.split(","):
            model, result["target"] = verify_cost.load_target("default", dtype, torch.device("cpu"), kernel)
            tokens = verify_cost.past_tokens(model, 120, "default")
            result["by"][f"{dtype}/{kernel}"] = step_profile(model, tokens, steps=args.steps)
            del model
    separate.publish("step_profile", step_markdown(result), result, None, args.into)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
