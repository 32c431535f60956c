"""Proposer quality and speed on the prompts people type: natural vs template-built, chain vs tree.

A learned proposer is only as good as its agreement with the target *on the prompts it will
see*. specviz's proposers were once trained and measured on template-built prompts ("What is
{topic}?"), where they looked far better than on what a person types. So every quality figure is
measured on two sets side by side (`bench.common.prompt_set`):

* ``natural``  -- `assets/prompts/natural.jsonl`: written by hand, never trained on (questions,
  advice, stories, paragraphs to summarise, code, arithmetic, two-turn conversations);
* ``template`` -- `assets/prompts/heldout.jsonl`: template-built, on topics never trained on.

Per (set, proposer, shape, temperature), through the real `SpeculativeDecoder`:

* **tokens per verify pass** -- committed tokens ÷ cycles (each cycle is one target forward);
* **acceptance** -- accepted ÷ tested drafts (a chain); for a tree, the accepted path's mean length;
* **α** at T=1 -- E[Σ min(p, q)] over drafted chain positions (`DraftStep.overlap`): how often a
  drafted token passes, without one draw's luck.

``--speed`` times, on the natural set, each configuration against the target's plain greedy
`generate` **in the same dtype**, interleaved per prompt (`bench.common.interleaved`), and reports
the fastest plain decoding of any dtype as a second baseline.

    python -m bench.quality --into docs                    # quality, both sets, float32 and bfloat16
    python -m bench.quality --speed --into docs            # speed on the natural set
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from specviz import DecodeConfig

from . import separate
from .common import Log, csv, interleaved, prompt_set, summary
from .systems import SEED, hf, spec

NAME = "quality"
SPEED_NAME = "quality_speed"


def parse_shape(text: str) -> dict[str, int]:
    """'chain:4' -> k=4 chain; 'tree:5x4x24' -> depth 5, width 4, 24 nodes."""
    kind, _, dims = text.partition(":")
    if kind == "chain":
        return {"k": int(dims), "tree_width": 1}
    depth, width, nodes = (int(x) for x in dims.split("x"))
    return {"k": depth, "tree_width": width, "tree_nodes": nodes}


def config(proposer: str, shape: str, temperature: float, max_new: int) -> DecodeConfig:
    return DecodeConfig(proposer=proposer, temperature=temperature, max_new_tokens=max_new,
                        cache_layout="contiguous", instrument=False, seed=SEED, **parse_shape(shape))


def measure_quality(pair: Any, prompts: list[list[int]], proposer: str, shape: str, temperature: float,
                    max_new: int) -> dict[str, Any]:
    runner = spec(pair, config(proposer, shape, temperature, max_new), keep_traces=True)
    tokens = cycles = accepted = tested = 0
    overlaps: list[float] = []
    for prompt in prompts:
        n_new, extra = runner(prompt)
        tokens += n_new
        cycles += extra["cycles"]
        accepted += extra["accepted"]
        tested += extra["tested"]
        overlaps += [d.overlap for t in extra["traces"] if t.tree is None for d in t.drafts]
    tree = parse_shape(shape)["tree_width"] > 1
    return {
        "tokens_per_verify": tokens / cycles if cycles else None,
        "acceptance_rate": None if tree or not tested else accepted / tested,
        "accepted_per_cycle": accepted / cycles if cycles else None,
        "alpha": sum(overlaps) / len(overlaps) if overlaps and temperature > 0 else None,
        "cycles": cycles,
        "tokens": tokens,
    }


def run_quality(pairs: dict[str, Any], sets: list[str], proposers: list[str], shapes: list[str],
                temps: list[float], n_prompts: int, max_new: int, log) -> dict[str, Any]:
    rows = []
    for dtype, pair in pairs.items():
        for set_name in sets:
            prompts = prompt_set(pair.tokenizer, set_name, n_prompts)
            for proposer in proposers:
                for shape in shapes:
                    if proposer == "lookup" and temps == [1.0]:
                        continue
                    for t in temps:
                        t0 = time.perf_counter()
                        r = measure_quality(pair, prompts, proposer, shape, t, max_new)
                        rows.append({"dtype": dtype, "set": set_name, "proposer": proposer, "shape": shape,
                                     "temperature": t, **r})
                        log(f"{dtype} {set_name} {proposer} {shape} T={t}: {r['tokens_per_verify']:.2f} tokens/verify"
                            f" acceptance {r['acceptance_rate']} α {r['alpha']} ({time.perf_counter() - t0:.0f}s)")
    return {"prompts": n_prompts, "max_new": max_new, "rows": rows}


def run_speed(pairs: dict[str, Any], configs: list[tuple[str, str]], temps: list[float], n_prompts: int,
              max_new: int, rounds: int, log) -> dict[str, Any]:
    """tokens/s of each (proposer, shape) per dtype and temperature over that dtype's plain `generate`
    at the same temperature (greedy at T=0, sampling at T=1), paired per prompt and round."""
    systems: dict[str, Any] = {}
    for dtype, pair in pairs.items():
        for t in temps:
            systems[f"plain_T{t:g}_{dtype}"] = hf(pair, t, max_new)
            for proposer, shape in configs:
                systems[f"{proposer}_{shape}_T{t:g}_{dtype}"] = spec(pair, config(proposer, shape, t, max_new))
    any_pair = next(iter(pairs.values()))
    prompts = prompt_set(any_pair.tokenizer, "natural", n_prompts)
    samples = interleaved({n: (lambda i, f=f: f(prompts[i])) for n, f in systems.items()}, len(prompts), rounds, log)
    by = {(s.system, s.round, s.prompt): s for s in samples}
    rate = {n: summary([s.tokens_per_s for s in samples if s.system == n])["median"] for n in systems}
    rows = []
    for t in temps:
        fastest_plain = max((f"plain_T{t:g}_{d}" for d in pairs), key=lambda n: rate[n])
        for name in systems:
            if f"_T{t:g}_" not in name:
                continue
            mine = [s for s in samples if s.system == name]
            dtype = name.rsplit("_", 1)[1]
            same = [s.tokens_per_s / by[(f"plain_T{t:g}_{dtype}", s.round, s.prompt)].tokens_per_s for s in mine]
            best = [s.tokens_per_s / by[(fastest_plain, s.round, s.prompt)].tokens_per_s for s in mine]
            cycles = sum(s.extra.get("cycles", 0) for s in mine)
            rows.append({"system": name, "dtype": dtype, "temperature": t, "fastest_plain": fastest_plain,
                         "tokens_per_s": summary([s.tokens_per_s for s in mine]),
                         "tokens_per_verify": sum(s.tokens for s in mine) / cycles if cycles else None,
                         "speedup_same_dtype": summary(same), "speedup_vs_fastest_plain": summary(best)})
    return {"prompts": n_prompts, "max_new": max_new, "rounds": rounds, "threads": torch.get_num_threads(),
            "rows": rows}


def quality_markdown(result: dict[str, Any], note: str) -> str:
    lines = [f"### Proposer quality: natural vs template prompts, chain vs tree ({NAME})", "",
             f"`python -m bench.quality --into docs`: {result['prompts']} prompts per set (evenly spread over the "
             f"set's kinds), {result['max_new']} new tokens each, contiguous cache, seed {SEED}. "
             "Tokens per verify pass = committed tokens ÷ cycles; acceptance = accepted ÷ tested drafts "
             "(chains); α = E[Σ min(p, q)] over drafted chain positions at T=1.", ""]
    if note:
        lines += [note, ""]
    lines += ["| dtype | proposer | shape | T | natural tokens/verify | template tokens/verify | natural acceptance "
              "| template acceptance | natural α | template α |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda x, f=".3f": "—" if x is None else format(x, f)  # noqa: E731
    keys = sorted({(r["dtype"], r["proposer"], r["shape"], r["temperature"]) for r in result["rows"]},
                  key=lambda k: (k[0], k[1], k[2].startswith("tree"), k[2], k[3]))
    for dtype, proposer, shape, t in keys:
        got = {r["set"]: r for r in result["rows"]
               if (r["dtype"], r["proposer"], r["shape"], r["temperature"]) == (dtype, proposer, shape, t)}
        nat, tem = got.get("natural", {}), got.get("template", {})
        lines.append(f"| {dtype} | {proposer} | {shape} | {t:g} | {fmt(nat.get('tokens_per_verify'), '.2f')} | "
                     f"{fmt(tem.get('tokens_per_verify'), '.2f')} | {fmt(nat.get('acceptance_rate'))} | "
                     f"{fmt(tem.get('acceptance_rate'))} | {fmt(nat.get('alpha'))} | {fmt(tem.get('alpha'))} |")
    return "\n".join(lines) + "\n"


def speed_markdown(result: dict[str, Any], note: str) -> str:
    lines = [f"### Speed on natural prompts, chain vs tree, float32 and bfloat16 ({SPEED_NAME})", "",
             f"`python -m bench.quality --speed --into docs`: {result['prompts']} natural prompts x "
             f"{result['max_new']} new tokens, {result['rounds']} interleaved rounds, {result['threads']} threads. "
             "Each speculative configuration is paired per prompt and round with the target's plain `generate` "
             "(greedy at T=0, sampling at T=1) in the same dtype; the second ratio is over the fastest plain "
             "decoding of any dtype at that temperature. Medians (min–max).", ""]
    if note:
        lines += [note, ""]
    lines += ["| system | tokens/s | tokens/verify | × plain, same dtype | × fastest plain (which) |",
              "|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        s, b, tv = r["speedup_same_dtype"], r["speedup_vs_fastest_plain"], r["tokens_per_verify"]
        lines.append(f"| {r['system']} | {r['tokens_per_s']['median']:.1f} | {'—' if tv is None else f'{tv:.2f}'} | "
                     f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f}) | {b['median']:.2f} "
                     f"({b['min']:.2f}–{b['max']:.2f}) ({r['fastest_plain']}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed", action="store_true", help="time configurations on the natural set instead")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--sets", default="natural,template")
    ap.add_argument("--proposers", default="feature,draft,lookup")
    ap.add_argument("--shapes", default="chain:4,tree:5x4x24",
                    help="chain:K or tree:DEPTHxWIDTHxNODES, comma-separated")
    ap.add_argument("--temps", default="0,1")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--note", default="")
    ap.add_argument("--merge", type=Path, metavar="BENCHMARKS_JSON",
                    help="keep the quality rows of this report that the run does not measure again")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md/.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    log = Log()
    from specviz.models import load_default_pair

    pairs = {d: load_default_pair(dtype=d) for d in args.dtypes.split(",")}
    if args.speed:
        configs = [(p, s) for p in csv(args.proposers) for s in csv(args.shapes)]
        result = run_speed(pairs, configs, [float(t) for t in csv(args.temps)], args.prompts, args.max_new,
                           args.rounds, log)
        name, text = SPEED_NAME, speed_markdown(result, args.note)
    else:
        result = run_quality(pairs, csv(args.sets), csv(args.proposers), csv(args.shapes),
                             [float(t) for t in csv(args.temps)], args.prompts, args.max_new, log)
        name, text = NAME, quality_markdown(result, args.note)
    if args.merge and not args.speed:
        result = merged(result, args.merge)
        text = quality_markdown(result, args.note)
    separate.publish(name, text, result, args.json, args.into)
    return 0


def merged(result: dict[str, Any], report: Path) -> dict[str, Any]:
    """`result`'s rows laid over the quality rows already in `report` (a benchmarks.json): a rerun of
    some proposers or dtypes keeps the others' figures (same prompts and length, or it refuses)."""
    import json

    old = json.loads(report.read_text()).get(NAME) if report.exists() else None
    if not old:
        return result
    if (old["prompts"], old["max_new"]) != (result["prompts"], result["max_new"]):
        raise SystemExit(f"--merge: {report} has {old['prompts']} prompts x {old['max_new']} tokens, this run "
                         f"{result['prompts']} x {result['max_new']}: rerun with the same --prompts/--max-new")
    key = lambda r: (r["dtype"], r["set"], r["proposer"], r["shape"], r["temperature"])  # noqa: E731
    rows = {key(r): r for r in old["rows"]} | {key(r): r for r in result["rows"]}
    return {**result, "rows": list(rows.values())}


if __name__ == "__main__":
    raise SystemExit(main())
