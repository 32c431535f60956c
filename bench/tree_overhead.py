"""Tree overhead: how much of a token-tree cycle is the tree machinery, not the models.

`python -m bench.tree_overhead [--dtypes float32,bfloat16] [--prompts 3] [--cycles 6] [--threads 1]
[--temperatures 0,1] [--layouts contiguous,paged] [--instrument both|on|off] [--note TEXT]
[--json FILE] [--into DIR]`

A token tree (docs/design.md §1c) adds work a chain does not have: growing the tree and choosing
its nodes, building the additive tree masks and position ids, walking the accepted path, moving the
accepted path's K/V into place, and recording every node. Issue 14 bounds it: **the tree machinery
costs at most 10 % of a cycle at N = 16 nodes**. This section measures that share on the embedded
default pair with the feature head, `DecodeConfig(proposer="feature", k=5, tree_width=4,
tree_nodes=16)`, at T = 0 and T = 1, with instrumentation (the app's traces) on and off, in both
cache layouts and both dtypes, over a few hand-written natural prompts (`bench.common.prompt_set`).

The machinery, by part (each part's *exclusive* time: what a part calls that is not machinery --
a model forward, the proposer's feed, a cache truncation that a chain makes too -- is not in it):

* **growth**: `specviz.tree.grow` (softmax, top-W children over the head's candidate tokens,
  frontiers), `select`, `top_children_rows`,
  the proposer's frontier callback (`proposers.base.TreeFeeder`, without its model forward);
* **mask**: `tree.attention_mask` / `verify_mask` (the target's and the proposer's tree masks),
  `TokenTree.position_ids` and `runtime.tree_inputs` (the mask's dtype/device, position ids);
* **walk**: `rules.walk_greedy` / `walk_sampled` (the accepted path and every node's verdict);
* **compaction**: `tree.compaction_moves`, `SpecvizCache.move` (the K/V copies and their events)
  and the engine's `_rollback` (without the truncation and the proposer's rollback, which a chain
  makes too);
* **records**: the engine's `_node_records` (each node as a `DraftStep` and a `TreeNode`).

Two independent measurements, on the same cycles (same prompt, same seed, so the same trees):

* **wall clock**: light `time.perf_counter` wrappers around each machinery function, around the
  model forwards (the target's, the feature head's and its output head, `full_logits`) and around
  the non-machinery calls nested in machinery (an exclusive stack: every microsecond of `step()`
  is charged to exactly one of forward / a part / the rest). The cross-check is the *rest*:
  machinery can never exceed cycle − forwards, and the table shows both;
* **cProfile** (deterministic): whole `step()` calls profiled, each part's cumulative time taken
  from the call graph minus its non-machinery callees (so nested functions are not counted
  twice). cProfile slows Python far more than torch's kernels, so its share is an upper bound.

Reported per configuration: cycle ms (mean over the measured cycles), forwards ms, machinery ms
and % of the cycle (wall clock), machinery % by cProfile, and the split by part in ms.
`--into DIR` puts the table into DIR/benchmarks.md between `<!-- tree_overhead:begin/end -->` and
the result into DIR/benchmarks.json (bench/separate.py).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import pstats
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from . import separate
from .common import Log, csv, dtype_names, machine, prompt_set

NAME = "tree_overhead"
PARTS = ("growth", "mask", "walk", "compaction", "records")
DTYPES = ("float32", "bfloat16")
LAYOUTS = ("contiguous", "paged")
BOUND_PCT = 10.0  # issue 14: the tree machinery costs <= 10 % of a cycle at N = 16
SHAPE = {"proposer": "feature", "k": 5, "tree_width": 4, "tree_nodes": 16}


# --------------------------------------------------------------------------- what is machinery


def _targets(pair: Any) -> list[tuple[Any, str, str, bool]]:
    """(owner, attribute, part, on an instance) of every function the wall clock charges: the
    machinery parts, the model forwards ("forward") and the non-machinery calls nested in
    machinery ("rest"). `step` itself is "rest", so the whole cycle is charged somewhere."""
    from specviz import engine, rules
    from specviz import runtime as rt
    from specviz import tree as trees
    from specviz.kv.base import SpecvizCache
    from specviz.proposers import base, feature

    head = pair.feature_head
    return [
        (engine.SpeculativeDecoder, "step", "rest", False),
        (pair.target, "forward", "forward", True),
        (head, "forward", "forward", True),
        (head, "full_logits", "forward", True),
        (trees, "grow", "growth", False),
        (trees, "select", "growth", False),
        (base.TreeFeeder, "__call__", "growth", False),
        (feature.FeatureProposer, "_feed", "rest", False),
        (trees, "attention_mask", "mask", False),
        (trees, "verify_mask", "mask", False),
        (trees.TokenTree, "position_ids", "mask", False),
        (rt, "tree_inputs", "mask", False),
        (feature, "tree_inputs", "mask", False),  # imported by name there
        (rules, "walk_greedy", "walk", False),
        (rules, "walk_sampled", "walk", False),
        (trees, "compaction_moves", "compaction", False),
        (SpecvizCache, "move", "compaction", False),
        (engine.SpeculativeDecoder, "_rollback", "compaction", False),
        (SpecvizCache, "truncate", "rest", False),
        (feature.FeatureProposer, "rollback", "rest", False),
        (engine.SpeculativeDecoder, "_node_records", "records", False),
    ]


class WallClock:
    """Exclusive wall-clock time per part: entering a wrapped function charges the time so far to
    the function it interrupts; leaving it charges its own time and resumes the caller's clock."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.stack: list[list[Any]] = []  # [part, since]

    def wrap(self, fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        clock = self

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            now = time.perf_counter()
            stack = clock.stack
            if stack:
                clock._charge(stack[-1][0], now - stack[-1][1])
            stack.append([part, now])
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                done, since = stack.pop()
                clock._charge(done, end - since)
                if stack:
                    stack[-1][1] = end

        return timed

    def _charge(self, part: str, seconds: float) -> None:
        self.seconds[part] = self.seconds.get(part, 0.0) + seconds

    def take(self) -> dict[str, float]:
        out, self.seconds = self.seconds, {}
        return out


@contextmanager
def wall_clock(pair: Any) -> Iterator[WallClock]:
    """Install the wrappers for the `with` block (and take them out again, whatever happens)."""
    clock = WallClock()
    undo: list[Callable[[], None]] = []
    try:
        for owner, attr, part, on_instance in _targets(pair):
            original = getattr(owner, attr) if on_instance else owner.__dict__[attr]
            setattr(owner, attr, clock.wrap(original, part))
            undo.append((lambda o=owner, a=attr: delattr(o, a)) if on_instance
                        else (lambda o=owner, a=attr, f=original: setattr(o, a, f)))
        yield clock
    finally:
        for fn in reversed(undo):
            fn()


def _key(fn: Any) -> tuple[str, int, str]:
    code = getattr(fn, "__wrapped__", fn).__code__
    return code.co_filename, code.co_firstlineno, code.co_name


def profile_parts(stats: dict[Any, Any]) -> dict[str, float]:
    """Seconds per part (and "cycle": all of `step`) from a cProfile call graph: a part's
    functions' cumulative time minus their calls into non-machinery (so nothing counts twice)."""
    from specviz import engine, rules
    from specviz import feature_head as fh
    from specviz import runtime as rt
    from specviz import tree as trees
    from specviz.kv.base import SpecvizCache
    from specviz.proposers import base, feature

    def ct(fn: Any) -> float:
        key = fn if isinstance(fn, tuple) else _key(fn)
        return stats[key][3] if key in stats else 0.0

    def edge(callee: Any, caller: Any) -> float:  # cumulative time of callee when called by caller
        ckey = callee if isinstance(callee, tuple) else _key(callee)
        rkey = caller if isinstance(caller, tuple) else _key(caller)
        return stats[ckey][4].get(rkey, (0, 0, 0, 0.0))[3] if ckey in stats else 0.0

    feeder = base.TreeFeeder.__call__
    run = next((k for k in stats if k[0] == feature.__file__ and k[2] == "run"), ("", 0, "run"))  # the closure
    dec = engine.SpeculativeDecoder
    return {
        "cycle": ct(dec.step),
        "growth": (ct(trees.grow) - edge(feeder, trees.grow)
                   + ct(feeder) - edge(trees.attention_mask, feeder) - edge(run, feeder)
                   + ct(run) - edge(feature.FeatureProposer._feed, run) - edge(fh.FeatureHead.full_logits, run)),
        "mask": (ct(trees.attention_mask) + ct(trees.verify_mask) - edge(trees.attention_mask, trees.verify_mask)
                 + ct(trees.TokenTree.position_ids) + ct(rt.tree_inputs)),
        "walk": ct(rules.walk_greedy) + ct(rules.walk_sampled),
        "compaction": (ct(dec._rollback) - edge(SpecvizCache.truncate, dec._rollback)
                       - edge(feature.FeatureProposer.rollback, dec._rollback)),
        "records": ct(dec._node_records),
    }


# --------------------------------------------------------------------------- the measurement


def measure(pair: Any, prompts: Sequence[list[int]], config: Any, cycles: int, warmup: int = 1) -> dict[str, Any]:
    """The same cycles twice (a fresh decoder, same seed): once under the wall clock's wrappers,
    once under cProfile. Per mode: totals over the measured cycles (warm-up cycles excluded)."""
    from specviz import SpeculativeDecoder

    wall: dict[str, float] = {}
    prof = cProfile.Profile()
    counted = tokens = 0
    per_cycle_pct: list[float] = []
    for prompt in prompts:
        dec = SpeculativeDecoder(pair, config)
        dec.start(prompt)
        with wall_clock(pair) as clock:
            for c in range(warmup + cycles):
                if dec.finished:
                    break
                clock.take()
                t0 = time.perf_counter()
                trace = dec.step()
                spent = time.perf_counter() - t0
                parts = clock.take()
                if c < warmup:
                    continue
                parts["cycle"] = spent
                for name, s in parts.items():
                    wall[name] = wall.get(name, 0.0) + s
                per_cycle_pct.append(100 * sum(parts.get(p, 0.0) for p in PARTS) / spent)
                counted += 1
                tokens += len(trace.emitted)
        dec = SpeculativeDecoder(pair, config)
        dec.start(prompt)
        for c in range(warmup + cycles):
            if dec.finished:
                break
            if c >= warmup:
                prof.enable()
            dec.step()
            prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    profiled = profile_parts(stats)
    n = max(counted, 1)
    machinery = sum(wall.get(p, 0.0) for p in PARTS)
    cycle = wall.get("cycle", 0.0)
    return {
        "cycles": counted, "tokens_per_cycle": tokens / n, "cycle_ms": 1000 * cycle / n,
        "forward_ms": 1000 * wall.get("forward", 0.0) / n, "rest_ms": 1000 * wall.get("rest", 0.0) / n,
        "machinery_ms": 1000 * machinery / n, "machinery_pct": 100 * machinery / cycle if cycle else 0.0,
        "non_forward_pct": 100 * (cycle - wall.get("forward", 0.0)) / cycle if cycle else 0.0,
        "max_cycle_pct": max(per_cycle_pct, default=0.0),
        "parts_ms": {p: 1000 * wall.get(p, 0.0) / n for p in PARTS},
        "profile_cycle_ms": 1000 * profiled["cycle"] / n,
        "profile_parts_ms": {p: 1000 * profiled[p] / n for p in PARTS},
        "profile_pct": 100 * sum(profiled[p] for p in PARTS) / profiled["cycle"] if profiled["cycle"] else 0.0,
    }


def configs(temperatures: Sequence[float], instruments: Sequence[bool], layouts: Sequence[str],
            max_new_tokens: int) -> list[dict[str, Any]]:
    return [{**SHAPE, "temperature": t, "instrument": i, "cache_layout": lay, "max_new_tokens": max_new_tokens,
             "seed": 0} for lay in layouts for t in temperatures for i in instruments]


def run(pairs: dict[str, Any], prompts: dict[str, list[list[int]]], *, temperatures: Sequence[float] = (0.0, 1.0),
        instruments: Sequence[bool] = (False, True), layouts: Sequence[str] = LAYOUTS, cycles: int = 6,
        warmup: int = 1, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every configuration on every pair ({dtype: pair}); `prompts` per dtype (one tokenizer)."""
    from specviz import DecodeConfig

    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "shape": SHAPE, "cycles_per_prompt": cycles, "warmup_cycles": warmup, "threads": torch.get_num_threads(),
        "prompts": len(next(iter(prompts.values()))), "bound_pct": BOUND_PCT, "machine": machine(), "rows": [],
    }
    for dtype, pair in pairs.items():
        result["pair"] = f"{pair.target_name} + feature head"
        warm = DecodeConfig(**configs([0.0], [False], ["contiguous"], cycles + warmup + 2)[0])
        measure(pair, prompts[dtype][:1], warm, 1)  # kernels, allocator: not measured
        for fields in configs(temperatures, instruments, layouts, 8 * (cycles + warmup)):
            row = measure(pair, prompts[dtype], DecodeConfig(**fields), cycles, warmup)
            row.update(dtype=dtype, layout=fields["cache_layout"], temperature=fields["temperature"],
                       instrument=fields["instrument"])
            result["rows"].append(row)
            log(f"  {dtype} {row['layout']:10} T={row['temperature']:g} instrument={row['instrument']!s:5} "
                f"cycle {row['cycle_ms']:6.1f} ms, machinery {row['machinery_ms']:5.2f} ms "
                f"({row['machinery_pct']:4.1f} %, cProfile {row['profile_pct']:4.1f} %)")
    result["load_average_end"] = os.getloadavg()
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["worst_pct"] = max((r["machinery_pct"] for r in result["rows"]), default=0.0)
    result["met"] = result["worst_pct"] <= BOUND_PCT
    return result


# --------------------------------------------------------------------------- the report


def markdown(result: dict[str, Any], command: str, note: str = "") -> str:
    m = result["machine"]
    load = ", ".join(f"{x:.1f}" for x in m["load_average_start"])
    lines = [
        "## Tree overhead: the tree machinery's share of a cycle (N = 16)",
        "",
        f"`{command}` — {result['pair']}, `DecodeConfig(proposer=\"feature\", k=5, tree_width=4, tree_nodes=16)`, "
        f"{result['prompts']} natural prompts, {result['cycles_per_prompt']} measured cycles each after "
        f"{result['warmup_cycles']} warm-up, {result['threads']} thread(s), {m['cpu']} "
        f"({m['logical_cpus']} logical CPUs). **Machinery** = growing and selecting the tree, the tree masks and "
        "position ids, the walk, the compaction (`compaction_moves`, `SpecvizCache.move`, `_rollback`) and the node "
        "records (`_node_records`), each part's exclusive time (model forwards, the proposer's feed and the "
        "truncations a chain makes too are not in it). *Wall*: `perf_counter` wrappers, means per cycle; "
        "*forwards* = the target's and the head's; *non-fwd %* = everything but the forwards (the cross-check: "
        "machinery ≤ it); *cProfile %* = the machinery's share of whole profiled cycles (an upper bound: the "
        "profiler slows Python more than torch's kernels); *max %* = the worst single cycle. Split in ms. "
        f"Load average {load} at the start, {', '.join(f'{x:.1f}' for x in result['load_average_end'])} at the "
        f"end. {note}".rstrip(),
        "",
        "| dtype | layout | T | instr. | tokens/cycle | cycle ms | forwards ms | machinery ms | machinery % "
        "| max % | non-fwd % | cProfile % | growth | mask | walk | compaction | records |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        split = " | ".join(f"{r['parts_ms'][p]:.2f}" for p in PARTS)
        lines.append(
            f"| {r['dtype']} | {r['layout']} | {r['temperature']:g} | {'on' if r['instrument'] else 'off'} "
            f"| {r['tokens_per_cycle']:.2f} | {r['cycle_ms']:.1f} | {r['forward_ms']:.1f} | {r['machinery_ms']:.2f} "
            f"| {r['machinery_pct']:.1f} | {r['max_cycle_pct']:.1f} | {r['non_forward_pct']:.1f} "
            f"| {r['profile_pct']:.1f} | {split} |")
    worst = max(result["rows"], key=lambda r: r["machinery_pct"], default=None)
    if worst is not None:
        big = max(PARTS, key=lambda p: worst["parts_ms"][p])
        verdict = "met" if result["met"] else "**not met**"
        lines += ["", f"Bound (issue 14, ≤ {BOUND_PCT:g} % of a cycle at N = 16): {verdict}. The largest share is "
                      f"{worst['machinery_pct']:.1f} % ({worst['dtype']}, {worst['layout']}, T = "
                      f"{worst['temperature']:g}, instrumentation {'on' if worst['instrument'] else 'off'}), "
                      f"mostly {big} ({worst['parts_ms'][big]:.2f} ms of {worst['machinery_ms']:.2f} ms)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tree_overhead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--prompts", type=int, default=3, help="natural prompts (spread over the file)")
    ap.add_argument("--cycles", type=int, default=6, help="measured cycles per prompt and configuration")
    ap.add_argument("--warmup", type=int, default=1, help="cycles per prompt run before measuring")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--instrument", choices=["both", "on", "off"], default="both")
    ap.add_argument("--tiny", action="store_true", help="the tiny random pair (a smoke run; numbers mean nothing)")
    ap.add_argument("--note", default="", help="a sentence added to the report (e.g. the machine was shared)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md, result into .json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtypes = dtype_names(args.dtypes, "bench.tree_overhead", DTYPES)
    log = Log()
    import specviz

    pairs = {d: specviz.build_tiny_pair(seed=0, dtype=d) if args.tiny else specviz.load_default_pair(dtype=d)
             for d in dtypes}
    prompts = {d: prompt_set(p.tokenizer, "natural", args.prompts) for d, p in pairs.items()}
    if args.tiny:
        prompts = {d: [ids[:48] for ids in ps] for d, ps in prompts.items()}  # the tiny model's short context
    instruments = {"both": (False, True), "on": (True,), "off": (False,)}[args.instrument]
    result = run(pairs, prompts, temperatures=[float(x) for x in args.temperatures.split(",")],
                 instruments=instruments, layouts=csv(args.layouts),
                 cycles=args.cycles, warmup=args.warmup, log=log)
    text = markdown(result, _command(argv if argv is not None else sys.argv[1:]), args.note)
    separate.publish(NAME, text, result, args.json, args.into)
    return 0


def _command(argv: Sequence[str]) -> str:
    """The command line as the report shows it: the note is printed as text, not repeated here."""
    shown, skip = [], False
    for arg in argv:
        if skip or arg.startswith("--note="):
            skip = False
            continue
        if arg == "--note":
            skip = True
            continue
        shown.append(arg)
    return " ".join(["python -m bench.tree_overhead", *shown])


if __name__ == "__main__":
    raise SystemExit(main())
