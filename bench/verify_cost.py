"""Verify cost v(N): what one target forward over N new tokens costs, in float32 and bfloat16.

`python -m bench.verify_cost [--threads 1,2] [--dtypes float32,bfloat16] [--ns 1,2,4,8,16,32]
[--past 120] [--reps 25] [--budget-s 300] [--shape default|smollm2-135m|smollm2-1.7b|tiny]
[--device cpu|cuda] [--note TEXT] [--json FILE] [--into DIR]`

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
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from . import separate
from .common import Log, cpu_name, dtype_names, median, summary
from .gpu import Clock

NAME = "verify_cost"
NS = (1, 2, 4, 8, 12, 16, 24, 32)
CHAIN_NS = (2, 8, 32)  # also timed without a mask: what the causal path of a chain costs
DTYPES = ("float32", "bfloat16")
SHAPES = ("default", "smollm2-135m", "smollm2-1.7b", "tiny")


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


def load_target(shape: str, dtype: str, device: torch.device) -> tuple[Any, str]:
    """(target model, its name): the embedded default target, or random weights of a shape."""
    if shape == "default":
        from specviz import load_default_pair

        pair = load_default_pair(device=device, dtype=dtype)
        return pair.target, pair.target_name
    from .gpu import DRAFT_SHAPE, TARGET_SHAPE, TINY_TARGET, build_model

    dims = {"smollm2-135m": DRAFT_SHAPE, "smollm2-1.7b": TARGET_SHAPE, "tiny": TINY_TARGET}[shape]
    model = build_model(dims, device, getattr(torch, dtype), 2048, seed=0)
    return model, f"random weights shaped like {shape}"


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
        for n in (1, max(ns), 4):
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
                "causal_ms": {n: summary(v) for n, v in chain[d].items()}} for d in benches}


def run(shape: str, dtypes: tuple[str, ...], threads: tuple[int, ...], ns: tuple[int, ...], past: int, reps: int,
        device: torch.device, log: Any = print, *, chain_ns: tuple[int, ...] = CHAIN_NS, min_reps: int = 5,
        budget_s: float = 300.0) -> dict[str, Any]:
    ns = tuple(sorted({1, *ns}))
    chain_ns = tuple(n for n in chain_ns if n in ns and n > 1)
    result: dict[str, Any] = {
        "shape": shape, "device": str(device), "past": past, "ns": list(ns), "chain_ns": list(chain_ns),
        "reps": reps, "min_reps": min_reps, "budget_s": budget_s, "dtypes": list(dtypes), "threads": list(threads),
        "cores": os.cpu_count(), "loadavg_start": os.getloadavg(), "machine": platform.platform(), "cpu": cpu_name(),
        "torch": torch.__version__, "by": {},
    }
    t_start = time.perf_counter()
    benches: dict[str, Bench] = {}
    for dtype in dtypes:
        model, name = load_target(shape, dtype, device)
        result["target"] = name
        tokens = past_tokens(model, past, shape)
        if dtype == "float32":
            from specviz.kv import create_cache

            probe = create_cache(model, "contiguous", max_len=past + 16, initial_len=past + 16)
            tree_forward(model, probe, tokens[:past], None)
            result["mask_check_max_diff"] = check(model, probe, tokens[past:])
        benches[dtype] = Bench(model, tokens, past, ns, device)
    for n_threads in threads if device.type == "cpu" else (0,):
        if device.type == "cpu":
            torch.set_num_threads(n_threads)
        log(f"verify cost: {', '.join(dtypes)}, {n_threads or 'GPU'} thread(s), past {past}, N = {list(ns)}")
        for dtype, timed in time_all(benches, ns, chain_ns, reps, min_reps, budget_s, log).items():
            result["by"][f"{dtype}/{n_threads}"] = timed
    result["loadavg_end"] = os.getloadavg()
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["rows"] = rows(result)
    return result


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (threads, dtype, N): ms, v(N) against float32's one-token step, v_same(N)."""
    out = []
    for key, timed in result["by"].items():
        dtype, n_threads = key.split("/")
        base32 = result["by"].get(f"float32/{n_threads}", timed)["tree_ms"][1]["median"]
        base = timed["tree_ms"][1]["median"]
        for n in result["ns"]:
            ms = timed["tree_ms"][n]["median"]
            causal = timed["causal_ms"].get(n, {}).get("median")
            out.append({"threads": int(n_threads), "dtype": dtype, "n": n, "ms": ms, "causal_ms": causal,
                        "min_ms": timed["tree_ms"][n]["min"], "rounds": timed["rounds"],
                        "v": ms / base32, "v_same": ms / base})
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.verify_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="default", choices=SHAPES,
                    help="the embedded default target (needs its package), or random weights of a shape")
    ap.add_argument("--device", default=None, help="cpu (default) or cuda")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--threads", default="1,2", help="CPU thread counts (ignored on a GPU)")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="new tokens per pass")
    ap.add_argument("--past", type=int, default=120, help="positions already in the cache")
    ap.add_argument("--reps", type=int, default=25, help="rounds (every N in every dtype once per round)")
    ap.add_argument("--min-reps", type=int, default=5, help="rounds run even past the budget")
    ap.add_argument("--budget-s", type=float, default=300.0, help="seconds of rounds per thread count")
    ap.add_argument("--chain-ns", default=",".join(map(str, CHAIN_NS)), help="Ns also timed without a mask")
    ap.add_argument("--note", default="", help="a sentence added to the report (e.g. the machine was shared)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md (gpu.md on CUDA)")
    ap.add_argument("--report", choices=["benchmarks", "gpu"], default=None,
                    help="which report --into writes (default: gpu on CUDA, benchmarks otherwise)")
    args = ap.parse_args(argv)
    device = torch.device(args.device or "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench.verify_cost: --device cuda, but torch sees no CUDA device")
    dtypes = dtype_names(args.dtypes, "bench.verify_cost", DTYPES)
    result = run(args.shape, dtypes, _ints(args.threads), _ints(args.ns), args.past, args.reps, device, Log(),
                 chain_ns=_ints(args.chain_ns), min_reps=args.min_reps, budget_s=args.budget_s)
    report = args.report or ("gpu" if device.type == "cuda" else "benchmarks")
    separate.publish(NAME, markdown(result, args.note), result, args.json, args.into, report)
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


if __name__ == "__main__":
    raise SystemExit(main())
