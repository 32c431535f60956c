"""Retrieval drafting against the datastore's size: how many tokens of the target's own text buy
how many tokens per verify pass (docs/design.md §1b, `specviz.proposers.retrieval`).

The shipped datastore (`assets/retrieval/store.npz`) is cut to its first N tokens (a datastore of
fewer answers, in the order they were generated), its suffix array rebuilt, and the same
configurations decode the same prompts through the real `SpeculativeDecoder`, each prompt in a
fresh session (no earlier texts of its own). Per size and configuration: tokens per verify pass,
acceptance (chains), and the drafting share of a cycle (time in the draft phase ÷ cycle time).

    python -m bench.retrieval_curve --sizes 100000,300000,0 --into docs     # 0: the whole store

Configurations (`--configs`): `proposer@shape`, shapes as in `bench.quality` (chain:K or
tree:DEPTHxWIDTHxNODES).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from specviz.suffix_store import SuffixStore, default_store

from . import separate
from .common import Log, cpu_name, csv, prompt_set
from .quality import config
from .systems import spec

NAME = "retrieval_curve"


def measure(pair: Any, prompts: list[list[int]], proposer: str, shape: str, temperature: float,
            max_new: int) -> dict[str, Any]:
    runner = spec(pair, config(proposer, shape, temperature, max_new))
    tokens = cycles = accepted = tested = 0
    draft_ms = cycle_ms = 0.0
    for prompt in prompts:
        n_new, extra = runner(prompt)
        tokens, cycles = tokens + n_new, cycles + extra["cycles"]
        accepted, tested = accepted + extra["accepted"], tested + extra["tested"]
        draft_ms += sum(extra["draft_ms"])
        cycle_ms += sum(extra["phase_ms"].values())
    return {"tokens_per_verify": tokens / cycles, "acceptance_rate": accepted / tested if tested else None,
            "draft_share": draft_ms / cycle_ms if cycle_ms else None, "cycles": cycles, "tokens": tokens}


def run(pair: Any, sizes: list[int], configs: list[tuple[str, str]], temperature: float, prompts: list[list[int]],
        max_new: int, log: Log) -> dict[str, Any]:
    full = default_store()
    if full is None:
        raise SystemExit("no datastore: build it with `python scripts/retrieval_data.py build`")
    rows = []
    for size in sizes:
        n = len(full) if size <= 0 else min(size, len(full))
        store = full if n == len(full) else SuffixStore(full.tokens[:n])
        sized = dataclasses.replace(pair, retrieval_store=store)
        for proposer, shape in configs:
            if "retrieval" not in proposer and size != sizes[-1]:
                continue  # the store changes nothing for it: measured once, at the last size
            t0 = time.perf_counter()
            r = measure(sized, prompts, proposer, shape, temperature, max_new)
            rows.append({"store_tokens": n, "proposer": proposer, "shape": shape, **r})
            log(f"{n:,} tokens, {proposer} {shape}: {r['tokens_per_verify']:.2f} tokens/verify, drafting "
                f"{100 * r['draft_share']:.1f} % of a cycle ({time.perf_counter() - t0:.0f}s)")
    return {"temperature": temperature, "prompts": len(prompts), "max_new": max_new, "cpu": cpu_name(),
            "rows": rows}


def markdown(result: dict[str, Any], note: str) -> str:
    lines = [f"### Retrieval against the datastore's size ({NAME})", "",
             f"`python -m bench.retrieval_curve`: {result['prompts']} natural prompts x {result['max_new']} new "
             f"tokens, T={result['temperature']:g}, each prompt a fresh session, on {result['cpu']}.", ""]
    if note:
        lines += [note, ""]
    lines += ["| datastore tokens | proposer | shape | tokens/verify | acceptance | drafting share of a cycle |",
              "|---:|---|---|---:|---:|---:|"]
    for r in result["rows"]:
        acc = "—" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.3f}"
        lines.append(f"| {r['store_tokens']:,} | {r['proposer']} | {r['shape']} | {r['tokens_per_verify']:.2f} | "
                     f"{acc} | {100 * r['draft_share']:.1f} % |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.retrieval_curve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,300000,0", help="datastore sizes in tokens (0: all)")
    ap.add_argument("--configs", default="retrieval@chain:4,feature@chain:4,feature@tree:5x4x24,"
                                         "feature+retrieval@chain:4,feature+retrieval@tree:5x4x24")
    ap.add_argument("--set", default="natural")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--note", default="")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md/.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from specviz.models import load_default_pair

    pair = load_default_pair(dtype=args.dtype)
    configs = [tuple(c.split("@", 1)) for c in csv(args.configs)]
    result = run(pair, [int(s) for s in csv(args.sizes)], configs, args.temperature,
                 prompt_set(pair.tokenizer, args.set, args.prompts), args.max_new, Log())
    separate.publish(NAME, markdown(result, args.note), result, args.json, args.into)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
