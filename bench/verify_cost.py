"""Verify cost v(N): what one target forward over N new tokens costs, in float32 and bfloat16.

`python -m bench.verify_cost [--threads 1,2] [--dtypes float32,bfloat16] [--ns 1,2,4,8,16,32]
[--past 120] [--reps 25] [--budget-s 300] [--shape default|smollm2-135m|smollm2-1.7b|tiny]
[--device cpu|cuda] [--kernels selected|reference|reference,selected] [--note TEXT] [--json FILE]
[--into DIR]`

Speculative decoding pays for its drafts in the verify pass: the target scores N new tokens (x_n
and the drafts, a chain or a tree of them) in one forward. The textbook speedup assumes that pass
costs one plain decoding step; on a CPU it does not, and how it grows with N decides how many
drafts are worth verifying (docs/design.md §1, "Expected gain"). This section measures exactly
that pass:

* the **real specviz cache** (contiguous layout) holding `--past` positions of a real prompt, as
  a verify pass in the middle of a run finds it;
* N new tokens at positions `past + depth`, under a **custom additive tree mask** for N > 1
  (each node sees the past and its own ancestors; the dtype's minimum elsewhere), built by
  `specviz.tree.attention_mask` and fed through `specviz.runtime.forward` exactly as the engine's
  tree verify does (the mask is built before the clock starts: this is the forward's cost). The
  mask also takes attention off the plain causal path that a chain uses. The tree is a binary
  heap (node i's parent is (i-1)//2); in a dense attention kernel the cost depends on N and the
  past, not on the tree's shape. A *chain* column times the same N tokens without a mask (a few
  Ns, `--chain-ns`) for comparison. N = 1 is the plain decoding step;
* rounds after a warm-up: each round times every N (alternating order) in every dtype back to
  back, so a slow minute of a shared machine slows both dtypes alike; `--reps` rounds, fewer (but
  at least `--min-reps`) once `--budget-s` is spent per thread count; medians and minima. The
  cache is truncated back to `past` after every pass (the rollback of a real cycle).

`--kernels` picks the matrix kernels the target runs (`specviz.kernels`): `selected` (the model
as the app runs it: the fastest exact kernel per layer and row count, timed at load), `reference`
(plain `nn.Linear`, `SPECVIZ_KERNELS=reference`), or both, each a target of its own, interleaved in
the same rounds; with both, the report is the per-kernel table (section `verify_kernels`), the CPU
named by its model and vector ISA, and the largest logit difference between the two kernels.

Reported per thread count: ms, **v(N) = ms / ms(1 token, float32)** (what a bfloat16 tree costs
in float32 plain steps) and **v_same(N) = ms / ms(1 token, same dtype)**. Before timing, `check`
asserts that the mask really is applied: a chain-shaped additive mask gives the logits of the
plain causal pass, and a tree node's logits equal a causal pass over its path.

`--into DIR` puts the table into DIR/benchmarks.md between `<!-- verify_cost:begin/end -->` and
the result into DIR/benchmarks.json (bench/separate.py); on a CUDA device it goes into DIR/gpu.md
and DIR/gpu.json instead, after `python -m bench.gpu` has written them (scripts/device_check.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from specviz.cachedir import isa_caps

from . import separate
from .common import Log, cpu_name, dtype_names, median, summary
from .gpu import Clock

NAME = "verify_cost"
KERNELS_NAME = "verify_kernels"  # the report's section when both kernels are timed
NS = (1, 2, 4, 8, 12, 16, 24, 32)
CHAIN_NS = (2, 8, 32)  # also timed without a mask: what the causal path of a chain costs
DTYPES = ("float32", "bfloat16")
SHAPES = ("default", "smollm2-135m", "smollm2-1.7b", "tiny")
KERNELS = ("reference", "selected")


# --------------------------------------------------------------------------- the tree and its mask


def heap_parents(n: int) -> list[int]:
    """Parents of an n-node tree rooted at x_n (node 0): a binary heap, node i under (i-1)//2."""
    return [-1] + [(i - 1) // 2 for i in range(1, n)]


def depths(parents: list[int]) -> list[int]:
    out: list[int] = []
    for p in parents:
        out.append(0 if p < 0 else out[p] + 1)
    return out


def tree_inputs(parents: list[int], past: int, model: Any) -> tuple[torch.Tensor, list[int]]:
    """(additive mask [1, 1, N, past + N], position ids) of the tree, as the engine's verify
    builds them (`specviz.tree.attention_mask`): node i sees the past, its ancestors and itself."""
    from specviz.tree import attention_mask

    weight = next(model.parameters())
    nodes = list(range(len(parents)))
    mask = attention_mask(parents, past, nodes, nodes, weight.dtype, weight.device)
    return mask, [past + d for d in depths(parents)]


def tree_forward(model: Any, cache: Any, ids: list[int], parents: list[int] | None,
                 inputs: tuple[torch.Tensor, list[int]] | None = None) -> torch.Tensor:
    """One target forward over `ids` into the specviz cache, through `specviz.runtime.forward` as the
    engine runs it: causal (a chain) when `parents` is None, else under the tree mask (`inputs`,
    prebuilt, or built here). Returns logits [N, V]; the caller truncates the cache back."""
    from specviz.runtime import forward

    if parents is None:
        return forward(model, cache, ids, "verify")
    inputs = inputs or tree_inputs(parents, cache.get_seq_length(), model)
    return forward(model, cache, ids, "verify", tree=inputs)


def check(model: Any, cache: Any, tokens: list[int], n: int = 7, tol: float = 1e-3) -> float:
    """Assert the mask is applied (float32 models): a chain-shaped mask gives the causal logits,
    and every tree node's logits equal a causal pass over its path. Returns the largest difference."""
    past = cache.get_seq_length()
    ids = tokens[:n]
    chain = list(range(-1, n - 1))
    causal = tree_forward(model, cache, ids, None).float()
    cache.truncate(past, "rollback")
    masked = tree_forward(model, cache, ids, chain).float()
    cache.truncate(past, "rollback")
    worst = (causal - masked).abs().max().item()
    parents = heap_parents(n)
    tree = tree_forward(model, cache, ids, parents).float()
    cache.truncate(past, "rollback")
    for i in range(n):
        path = [i]
        while parents[path[-1]] >= 0:
            path.append(parents[path[-1]])
        alone = tree_forward(model, cache, [ids[j] for j in reversed(path)], None).float()[-1]
        cache.truncate(past, "rollback")
        worst = max(worst, (alone - tree[i]).abs().max().item())
    scale = max(1.0, causal.abs().max().item())  # relative on large logits (a GPU's kernels differ by shape)
    assert worst < tol * scale, f"the tree mask is not what the model applied: logits differ by {worst}"
    return worst


# --------------------------------------------------------------------------- models


def load_target(shape: str, dtype: str, device: torch.device, kernels: str = "selected") -> tuple[Any, str]:
    """(target model, its name): the embedded default target, or random weights of a shape, running
    `kernels` ("selected": chosen at load as the app does; "reference": plain nn.Linear)."""
    from specviz import kernels as kernel_choice
    from specviz.cachedir import cache_dir

    with _kernel_mode(kernels):
        if shape == "default":
            from specviz import load_default_pair

            pair = load_default_pair(device=device, dtype=dtype)
            return pair.target, pair.target_name
        from .gpu import DRAFT_SHAPE, TARGET_SHAPE, TINY_TARGET, build_model

        dims = {"smollm2-135m": DRAFT_SHAPE, "smollm2-1.7b": TARGET_SHAPE, "tiny": TINY_TARGET}[shape]
        model = build_model(dims, device, getattr(torch, dtype), 2048, seed=0)
        kernel_choice.install([("target", model, True)], cache_dir() / "kernels.json")
        return model, f"random weights shaped like {shape}"


@contextlib.contextmanager
def _kernel_mode(kernels: str) -> Iterator[None]:
    """`SPECVIZ_KERNELS` set to `kernels` while a target loads (the loader reads it)."""
    from specviz.kernels import MODE_ENV

    before = os.environ.get(MODE_ENV)
    os.environ[MODE_ENV] = kernels
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MODE_ENV, None)
        else:
            os.environ[MODE_ENV] = before


def past_tokens(model: Any, past: int, shape: str) -> list[int]:
    """`past` token ids: a real held-out prompt repeated (the default target), else random ids."""
    vocab = model.config.vocab_size
    if shape == "default":
        from transformers import AutoTokenizer

        from .common import load_prompts

        tok = AutoTokenizer.from_pretrained(model.name_or_path, local_files_only=True)
        ids = [t for p in load_prompts(tok, 4) for t in p]
        while len(ids) < past + 64:
            ids = ids + ids
        return ids[: past + 64]
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (past + 64,), generator=gen).tolist()


# --------------------------------------------------------------------------- timing


class Bench:
    """One dtype's target with its cache at `past` positions, ready to time passes over N tokens."""

    def __init__(self, model: Any, tokens: list[int], past: int, ns: tuple[int, ...], device: torch.device) -> None:
        from specviz.kv import create_cache

        self.model, self.past, self.clock = model, past, Clock(device, budget_s=0.0)
        self.cache = create_cache(model, "contiguous", max_len=past + max(ns) + 8, initial_len=past + max(ns) + 8)
        tree_forward(model, self.cache, tokens[:past], None)  # the past, as a run's earlier cycles left it
        self.new = tokens[past : past + max(ns)]
        self.masks = {n: tree_inputs(heap_parents(n), past, model) for n in ns}  # built once: the forward is timed

    def once(self, n: int, masked: bool = True) -> float:
        parents = heap_parents(n) if masked and n > 1 else None
        ms, _ = self.clock.ms(lambda: tree_forward(self.model, self.cache, self.new[:n], parents, self.masks[n]))
        self.cache.truncate(self.past, "rollback")  # the rollback of a real cycle
        return ms


def time_all(benches: dict[str, Bench], ns: tuple[int, ...], chain_ns: tuple[int, ...], reps: int,
             min_reps: int, budget_s: float, log: Any) -> dict[str, Any]:
    """Medians of `reps` rounds (fewer, but at least `min_reps`, once `budget_s` is spent). In
    each round every N is timed in every dtype back to back (order alternating), so a slow
    minute of a shared machine slows both dtypes alike and their ratio stays fair."""
    for bench in benches.values():  # warm-up: kernels, allocator, caches
        for n in sorted({1, max(ns), min(4, max(ns))} & set(ns)):
            bench.once(n)
            bench.once(n, masked=False)
    tree = {d: {n: [] for n in ns} for d in benches}
    chain = {d: {n: [] for n in chain_ns} for d in benches}
    t0 = time.perf_counter()
    done = 0
    for r in range(reps):
        if done >= min_reps and time.perf_counter() - t0 > budget_s:
            break
        order = list(benches) if r % 2 == 0 else list(reversed(benches))
        for n in ns if r % 2 == 0 else tuple(reversed(ns)):
            for d in order:
                tree[d][n].append(benches[d].once(n))
                if n in chain_ns:
                    chain[d][n].append(benches[d].once(n, masked=False))
        done += 1
    for d in benches:
        log(f"  {d}, {done} rounds, ms (tree mask): " + ", ".join(f"{n}: {median(v):.1f}" for n, v in tree[d].items()))
    return {d: {"rounds": done, "tree_ms": {n: summary(v) for n, v in tree[d].items()},
                "causal_ms": {n: summary(v) for n, v in chain[d].items()}, "tree_raw": tree[d]} for d in benches}


def run(shape: str, dtypes: tuple[str, ...], threads: tuple[int, ...], ns: tuple[int, ...], past: int, reps: int,
        device: torch.device, log: Any = print, *, chain_ns: tuple[int, ...] = CHAIN_NS, min_reps: int = 5,
        budget_s: float = 300.0, kernels: tuple[str, ...] = ("selected",), plain_tokens: int = 0) -> dict[str, Any]:
    from specviz.kernels import machine

    ns = tuple(sorted({1, *ns}))
    chain_ns = tuple(n for n in chain_ns if n in ns and n > 1)
    result: dict[str, Any] = {
        "shape": shape, "device": str(device), "past": past, "ns": list(ns), "chain_ns": list(chain_ns),
        "reps": reps, "min_reps": min_reps, "budget_s": budget_s, "dtypes": list(dtypes), "threads": list(threads),
        "kernels": list(kernels), "cores": os.cpu_count(), "loadavg_start": os.getloadavg(),
        "machine": platform.platform(), "cpu": cpu_name(), "torch": torch.__version__,
        "by": {}, "kernel_memory": {}, "kernel_logit_diff": {},
    }
    t_start = time.perf_counter()
    if device.type == "cpu":  # kernels are chosen at load for the thread count then in force
        torch.set_num_threads(threads[0])
    result["cpu_isa"] = machine()[0]
    result["isa_caps"] = isa_caps()
    benches: dict[str, Bench] = {}
    for dtype in dtypes:
        for kernel in kernels:
            model, name = load_target(shape, dtype, device, kernel)
            result["target"] = name
            result["kernel_memory"][f"{dtype}/{kernel}"] = getattr(model, "specviz_kernels", None)
            tokens = past_tokens(model, past, shape)
            if dtype == "float32":
                from specviz.kv import create_cache

                probe = create_cache(model, "contiguous", max_len=past + 16, initial_len=past + 16)
                tree_forward(model, probe, tokens[:past], None)
                result.setdefault("mask_check_max_diff", {})[kernel] = check(model, probe, tokens[past:])
            benches[f"{dtype}/{kernel}"] = Bench(model, tokens, past, ns, device)
        if len(kernels) > 1:
            result["kernel_logit_diff"][dtype] = logit_diff(benches[f"{dtype}/{kernels[0]}"],
                                                            benches[f"{dtype}/{kernels[1]}"], ns)
    if plain_tokens:
        result["plain_tokens_per_s"] = plain_decoding(benches, plain_tokens, min_reps, log)
    for n_threads in threads if device.type == "cpu" else (0,):
        if device.type == "cpu":
            torch.set_num_threads(n_threads)
        log(f"verify cost: {', '.join(benches)}, {n_threads or 'GPU'} thread(s), past {past}, N = {list(ns)}")
        for variant, timed in time_all(benches, ns, chain_ns, reps, min_reps, budget_s, log).items():
            result["by"][f"{variant}/{n_threads}"] = timed
    result["loadavg_end"] = os.getloadavg()
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["rows"] = rows(result)
    return result


def plain_decoding(benches: dict[str, Bench], tokens: int, rounds: int, log: Any) -> dict[str, Any]:
    """Plain greedy decoding (`AutoregressiveDecoder`, prefill excluded) of `tokens` new tokens from
    the same prompt, each variant once per round in alternating order: tokens/s, median and
    quartiles, and the same-round ratio to the same dtype's reference kernel."""
    from specviz import AutoregressiveDecoder, DecodeConfig

    prompt = benches[next(iter(benches))].new[:16]
    samples: dict[str, list[float]] = {v: [] for v in benches}
    for r in range(rounds + 1):  # round 0 warms up
        for variant in list(benches) if r % 2 == 0 else list(benches)[::-1]:
            dec = AutoregressiveDecoder(benches[variant].model, DecodeConfig(temperature=0, max_new_tokens=tokens))
            dec.start(prompt)
            t0 = time.perf_counter()
            dec.generate()
            if r:
                samples[variant].append(tokens / (time.perf_counter() - t0))
    def base(variant: str) -> list[float]:  # the same dtype's reference kernel where it was timed
        return samples.get(variant.split("/")[0] + "/reference", samples[next(iter(samples))])

    out = {v: {"median": median(x), "quartiles": statistics.quantiles(x, n=4) if len(x) > 1 else x * 3,
               "vs_reference": median([a / b for a, b in zip(x, base(v))])} for v, x in samples.items()}
    log("plain decoding, tokens/s: " + ", ".join(f"{v} {o['median']:.1f}" for v, o in out.items()))
    return out


def logit_diff(a: Bench, b: Bench, ns: tuple[int, ...]) -> dict[str, Any]:
    """The largest |Δlogit| between two kernels' passes over the same tokens (each N under its tree
    mask), and at how many positions their argmax differs (a near-tie flipped by rounding)."""
    worst, flips, positions = 0.0, 0, 0
    with torch.inference_mode():
        for n in ns:
            parents = heap_parents(n) if n > 1 else None
            la = tree_forward(a.model, a.cache, a.new[:n], parents, a.masks[n]).float()
            lb = tree_forward(b.model, b.cache, b.new[:n], parents, b.masks[n]).float()
            a.cache.truncate(a.past, "rollback")
            b.cache.truncate(b.past, "rollback")
            worst = max(worst, (la - lb).abs().max().item())
            flips += int((la.argmax(-1) != lb.argmax(-1)).sum())
            positions += n
    return {"max_abs": worst, "argmax_flips": flips, "positions": positions}


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (threads, dtype, kernel, N): ms, v(N) against the one-token float32 step (of the
    reference kernel where it was timed, else of the same kernel), v_same(N) against the same
    dtype and kernel's one-token step."""
    out = []
    for key, timed in result["by"].items():
        dtype, kernel, n_threads = key.split("/")
        base32 = result["by"].get(f"float32/reference/{n_threads}") or result["by"].get(f"float32/{kernel}/{n_threads}")
        base32_ms = (base32 or timed)["tree_ms"][1]["median"]
        base = timed["tree_ms"][1]["median"]
        for n in result["ns"]:
            ms = timed["tree_ms"][n]["median"]
            causal = timed["causal_ms"].get(n, {}).get("median")
            out.append({"threads": int(n_threads), "dtype": dtype, "kernel": kernel, "n": n, "ms": ms,
                        "causal_ms": causal, "min_ms": timed["tree_ms"][n]["min"], "rounds": timed["rounds"],
                        "v": ms / base32_ms, "v_same": ms / base})
    return out


# --------------------------------------------------------------------------- the report


def markdown(result: dict[str, Any], note: str = "") -> str:
    """The v(N) table for docs/benchmarks.md (or docs/gpu.md on a GPU)."""
    load = ", ".join(f"{x:.1f}" for x in result["loadavg_start"])
    where = result["device"] if result["device"] != "cpu" else f"CPU ({result['cpu']}, {result['cores']} cores)"
    chain = ", ".join(map(str, result["chain_ns"]))
    lines = [
        "## Verify cost v(N): one target forward over N new tokens",
        "",
        f"`python -m bench.verify_cost` — {result['target']} on {where}, a contiguous specviz cache holding "
        f"{result['past']} past positions; N new tokens under an additive tree mask (a binary tree at positions "
        "past + depth, built by `specviz.tree.attention_mask` and fed through `specviz.runtime.forward` as the "
        "engine's tree verify does; N = 1 is the plain decoding step). Medians over rounds; each round times every "
        "N in every dtype back to back, so both dtypes meet the same load. **v(N)** = ms ÷ ms of one float32 "
        "token at the same thread count; **v same** = ms ÷ ms of one token in the same dtype; *min* = the fastest "
        f"pass; *chain* = the same N tokens without a mask (the causal path of a chain verify; N = {chain}). "
        f"Load average {load} at the start, {', '.join(f'{x:.1f}' for x in result['loadavg_end'])} at the end. "
        f"{note}".rstrip(),
        "",
    ]
    for n_threads in sorted({r["threads"] for r in result["rows"]}):
        mine = [r for r in result["rows"] if r["threads"] == n_threads]
        dts = [d for d in result["dtypes"] if any(r["dtype"] == d for r in mine)]
        label = f"{n_threads} thread{'s' if n_threads != 1 else ''}" if n_threads else "GPU"
        head = "| N | " + " | ".join(f"{d} ms | min | v(N) | v same | chain ms" for d in dts) + " |"
        lines += [f"**{label}** ({mine[0]['rounds']} rounds)", "", head, "|---|" + "---|" * (5 * len(dts))]
        for n in result["ns"]:
            cells = []
            for d in dts:
                r = next(x for x in mine if x["dtype"] == d and x["n"] == n)
                chain_ms = "—" if r["causal_ms"] is None else f"{r['causal_ms']:.1f}"
                cells.append(f"{r['ms']:.1f} | {r['min_ms']:.1f} | {r['v']:.2f} | {r['v_same']:.2f} | {chain_ms}")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines += ["", _reading(mine, dts, result["ns"]), ""]
    return "\n".join(lines)


def _reading(rows_: list[dict[str, Any]], dtypes: list[str], ns: list[int]) -> str:
    """One sentence per thread count: how much N = max costs over N = 1, by median and by the
    fastest pass (the minimum is what an unloaded machine approaches)."""
    top = max(ns)
    parts = []
    for d in dtypes:
        one = next(r for r in rows_ if r["dtype"] == d and r["n"] == 1)
        big = next(r for r in rows_ if r["dtype"] == d and r["n"] == top)
        parts.append(f"{d} {big['ms'] / one['ms']:.2f}x by median, {big['min_ms'] / one['min_ms']:.2f}x by the "
                     f"fastest passes ({one['min_ms']:.0f} → {big['min_ms']:.0f} ms)")
    return f"From 1 to {top} new tokens a pass grows: " + "; ".join(parts) + "."


def kernels_markdown(result: dict[str, Any], note: str = "") -> str:
    """The per-kernel v(N) table: reference and selected kernels side by side, per dtype."""
    load = ", ".join(f"{x:.1f}" for x in result["loadavg_start"])
    end = ", ".join(f"{x:.1f}" for x in result["loadavg_end"])
    diffs = "; ".join(f"{d}: max |Δlogit| {v['max_abs']:.1e}, argmax differs at {v['argmax_flips']} of "
                      f"{v['positions']} positions" for d, v in result["kernel_logit_diff"].items())
    memory = "; ".join(f"{key}: {m['packed_bytes'] / 2**20:.0f} MiB packed, {m['dropped_bytes'] / 2**20:.0f} MiB "
                       f"of plain weights dropped, {m['extra_bytes'] / 2**20:+.0f} MiB net"
                       for key, m in result["kernel_memory"].items() if m and key.endswith("/selected"))
    caps = result["isa_caps"] + " " if result.get("isa_caps") else ""  # the environment the run was capped by
    lines = [
        "## Verify cost per kernel: reference (`nn.Linear`) against the kernels chosen at load",
        "",
        f"`{caps}python -m bench.verify_cost --kernels reference,selected "
        f"--threads {','.join(map(str, result['threads']))} "
        f"--ns {','.join(map(str, result['ns']))} --reps {result['reps']}` — {result['target']}, "
        f"CPU **{result['cpu']}** ({result['cores']} cores; {result['cpu_isa']}); a contiguous cache of "
        f"{result['past']} past positions, "
        "N new tokens under the tree mask as the engine's verify runs them (N = 1: a plain step). Each round "
        "times every N with every kernel and dtype back to back. *ms*: median (quartiles); **v(N)** = ms ÷ the "
        "same kernel's one-token ms (what the cost law uses); *sel ÷ ref*: the median over rounds of the "
        "same-round ratio selected ÷ reference (N = 1: plain decoding). "
        f"Logits, selected against reference: {diffs}. Memory: {memory}. Load average {load} at the start, "
        f"{end} at the end. {note}".rstrip(),
        "",
    ]
    for n_threads in sorted({r["threads"] for r in result["rows"]}):
        lines += _kernel_table(result, n_threads)
    lines += [_bounds(result), ""]
    if plain := result.get("plain_tokens_per_s"):
        lines += ["Plain greedy decoding (`AutoregressiveDecoder`, the same rounds' prompt), tokens/s, median "
                  "(quartiles), and the same-round ratio to the same dtype's reference kernel: " + "; ".join(
                      f"{v} {o['median']:.1f} ({o['quartiles'][0]:.1f}–{o['quartiles'][2]:.1f}), "
                      f"{o['vs_reference']:.2f}x" for v, o in plain.items()) + ".", ""]
    return "\n".join(lines)


def _bounds(result: dict[str, Any]) -> str:
    """Issue 34's bounds, float32 at the first thread count: v(2) <= 1.25 and v(4) <= 1.45 on an
    AVX2-only CPU, no worse than the reference kernel on a CPU with AVX512 or AMX; plain decoding
    no slower (the one-token step's same-round ratio)."""
    n_threads = min(r["threads"] for r in result["rows"])
    by = {(r["kernel"], r["n"]): r for r in result["rows"] if r["dtype"] == "float32" and r["threads"] == n_threads}
    if not all((k, n) in by for k in KERNELS for n in (1, 2, 4)):
        return ""
    capped = "=avx2" in result.get("isa_caps", "").lower()  # ONEDNN_MAX_CPU_ISA=AVX2 …: an AVX2-only CPU's code
    wide = not capped and any(f in result.get("cpu_isa", "") for f in ("avx512f", "amx"))
    parts = []
    for n, limit in ((2, 1.25), (4, 1.45)):
        sel, ref = by["selected", n]["v_same"], by["reference", n]["v_same"]
        met = sel <= ref if wide else sel <= limit
        rule = f"no worse than reference's {ref:.2f}" if wide else f"≤ {limit}"
        parts.append(f"v({n}) = {sel:.2f} ({rule}: {'met' if met else '**not met**'}; ≤ {limit} "
                     f"{'met' if sel <= limit else 'not met'} too)")
    raw = {k: result["by"][f"float32/{k}/{n_threads}"]["tree_raw"][1] for k in KERNELS}
    step = median([b / a for a, b in zip(raw["reference"], raw["selected"])])
    parts.append(f"plain step selected ÷ reference {step:.2f} (no slower: {'met' if step <= 1.02 else '**not met**'}, "
                 "2 % for timing noise)")
    cpu = "this CPU" + (" with AVX512" if wide else "") + (" capped to AVX2" if capped else "")
    where = f"float32, {n_threads} thread, {cpu}"
    return f"**Bounds** ({where}): " + "; ".join(parts) + "."


def _kernel_table(result: dict[str, Any], n_threads: int) -> list[str]:
    mine = [r for r in result["rows"] if r["threads"] == n_threads]
    dtypes = [d for d in result["dtypes"] if any(r["dtype"] == d for r in mine)]
    label = f"{n_threads} thread{'s' if n_threads != 1 else ''}" if n_threads else "GPU"
    head = "| N | " + " | ".join(f"{d} reference ms | selected ms | v(N) ref | v(N) sel | sel ÷ ref" for d in dtypes)
    lines = [f"**{label}** ({mine[0]['rounds']} rounds)", "", head + " |", "|---|" + "---|" * (5 * len(dtypes))]
    for n in result["ns"]:
        cells = []
        for d in dtypes:
            ref, sel = (next(r for r in mine if (r["dtype"], r["kernel"], r["n"]) == (d, k, n)) for k in KERNELS)
            raw = {k: result["by"][f"{d}/{k}/{n_threads}"]["tree_raw"][n] for k in KERNELS}
            paired = median([b / a for a, b in zip(raw["reference"], raw["selected"])])
            cells.append(f"{_ms(raw['reference'])} | {_ms(raw['selected'])} | {ref['v_same']:.2f} | "
                         f"{sel['v_same']:.2f} | {paired:.2f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _ms(values: list[float]) -> str:
    q1, q2, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return f"{q2:.1f} ({q1:.0f}–{q3:.0f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.verify_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="default", choices=SHAPES,
                    help="the embedded default target (needs its package), or random weights of a shape")
    ap.add_argument("--device", default=None, help="cpu (default) or cuda")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--kernels", default="selected", help="selected, reference, or both (reference,selected)")
    ap.add_argument("--threads", default="1,2", help="CPU thread counts (ignored on a GPU)")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="new tokens per pass")
    ap.add_argument("--past", type=int, default=120, help="positions already in the cache")
    ap.add_argument("--reps", type=int, default=25, help="rounds (every N in every dtype once per round)")
    ap.add_argument("--min-reps", type=int, default=5, help="rounds run even past the budget")
    ap.add_argument("--budget-s", type=float, default=300.0, help="seconds of rounds per thread count")
    ap.add_argument("--chain-ns", default=",".join(map(str, CHAIN_NS)), help="Ns also timed without a mask")
    ap.add_argument("--plain-tokens", type=int, default=0,
                    help="also time plain greedy decoding of this many tokens per variant (min-reps rounds)")
    ap.add_argument("--note", default="", help="a sentence added to the report (e.g. the machine was shared)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md (gpu.md on CUDA)")
    ap.add_argument("--report", choices=["benchmarks", "gpu"], default=None,
                    help="which report --into writes (default: gpu on CUDA, benchmarks otherwise)")
    ap.add_argument("--section", default=None, help="the report's section (default: verify_kernels with both "
                    "kernels, verify_cost otherwise); e.g. verify_kernels_avx2 for a run under ONEDNN_MAX_CPU_ISA=AVX2 "
                    "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2, beside the machine's own")
    args = ap.parse_args(argv)
    device = torch.device(args.device or "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench.verify_cost: --device cuda, but torch sees no CUDA device")
    dtypes = dtype_names(args.dtypes, "bench.verify_cost", DTYPES)
    kernels = tuple(k for k in KERNELS if k in {x.strip() for x in args.kernels.split(",")})
    if not kernels:
        raise SystemExit(f"bench.verify_cost: --kernels takes {', '.join(KERNELS)} or both, got {args.kernels!r}")
    result = run(args.shape, dtypes, _ints(args.threads), _ints(args.ns), args.past, args.reps, device, Log(),
                 chain_ns=_ints(args.chain_ns), min_reps=args.min_reps, budget_s=args.budget_s, kernels=kernels,
                 plain_tokens=args.plain_tokens)
    report = args.report or ("gpu" if device.type == "cuda" else "benchmarks")
    if len(kernels) > 1:
        separate.publish(args.section or KERNELS_NAME, kernels_markdown(result, args.note), result, args.json,
                         args.into, report)
    else:
        separate.publish(args.section or NAME, markdown(result, args.note), result, args.json, args.into, report)
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


if __name__ == "__main__":
    raise SystemExit(main())
