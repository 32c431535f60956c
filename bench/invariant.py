"""The cache invariant's floor: how far a *plain* decoder's cache is from a fresh prefill.

`python -m bench.invariant [--prompts 6] [--tokens 48] [--dtypes float32,bfloat16] [--into docs]`

After every cycle specviz checks that each cache holds what a fresh prefill of the committed
sequence would hold (`SpeculativeDecoder.check_invariant`: the largest |K/V difference|). In exact
arithmetic that difference is 0. In floating point it is not, and not because of speculation: a
position's K/V computed in a one-token decoding step, in a verify pass over five tokens and in a
prefill over the whole prompt come from matrix products of different shapes, whose kernels sum in
different orders. So the honest yardstick is the decoder the invariant stands for, **plain
autoregressive decoding**: transformers' own `DynamicCache`, one token per forward, greedy.

Per prompt of the natural set (`bench.common.prompt_set`), through the real default pair, T = 0:

* **plain vs prefill** -- the plain decoder's cache after `--tokens` tokens against a fresh
  prefill of the same sequence: the rounding floor of the model as run;
* **chain / tree vs prefill** -- the largest difference `check_invariant` reports over every cycle
  of the speculative decoder (feature head, chain K = 4 and tree 5x4x24);
* **chain / tree vs plain** -- the speculative decoder's target cache at the end against the plain
  decoder's cache over the same tokens (T = 0 gives the same text): "what a plain decoder would
  hold", measured directly.

Absolute differences, and relative to the largest |K/V| in the reference (a K entry of this model
reaches ~20, where one float32 ulp is ~2e-6).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import torch

from specviz import DecodeConfig
from specviz.engine import SpeculativeDecoder
from specviz.runtime import reference_kv

from . import separate
from .common import Log, prompt_set

NAME = "invariant"
KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values)
SHAPES = {"chain": {"k": 4}, "tree": {"k": 5, "tree_width": 4, "tree_nodes": 24}}


def plain_cache(model: Any, prompt: list[int], tokens: int) -> tuple[list[int], KV]:
    """Greedy plain decoding with transformers' DynamicCache, one token per forward: (the sequence
    whose K/V the cache holds, per layer (K, V))."""
    from transformers import DynamicCache

    cache, seq = DynamicCache(), list(prompt)
    with torch.no_grad():
        model(input_ids=torch.tensor([seq[:-1]]), past_key_values=cache, use_cache=True)
        for _ in range(tokens):
            out = model(input_ids=torch.tensor([seq[-1:]]), past_key_values=cache, use_cache=True)
            seq.append(int(out.logits[0, -1].argmax()))
    return seq[:-1], [(layer.keys, layer.values) for layer in cache.layers]


def difference(a: KV, b: KV, n: int) -> dict[str, float]:
    """Largest |a - b| over the first n positions of every layer's K and V, absolute and relative to
    the largest |b|."""
    worst = scale = 0.0
    for (ka, va), (kb, vb) in zip(a, b, strict=True):
        for x, y in ((ka, kb), (va, vb)):
            x, y = x[..., :n, :].float(), y[..., :n, :].float()
            worst = max(worst, (x - y).abs().max().item())
            scale = max(scale, y.abs().max().item())
    return {"abs": worst, "rel": worst / scale if scale else 0.0}


def one_prompt(pair: Any, prompt: list[int], tokens: int) -> dict[str, Any]:
    with torch.no_grad():
        seq, plain = plain_cache(pair.target, prompt, tokens)
        floor = difference(plain, reference_kv(pair.target, seq), len(seq))
        row: dict[str, Any] = {"prompt_tokens": len(prompt), "plain_vs_prefill": floor}
    for name, shape in SHAPES.items():
        dec = SpeculativeDecoder(pair, DecodeConfig(proposer="feature", temperature=0.0, check_invariant=True,
                                                    cache_layout="contiguous", max_new_tokens=tokens, **shape))
        dec.start(prompt)
        worst = 0.0
        while not dec.finished:
            tr = dec.step()
            worst = max(worst, (tr.invariant_max_abs_diff or {}).get("target", 0.0))
        cache = dec.target_cache
        n = min(cache.get_seq_length(), len(seq))
        same = list(dec.committed[:n]) == seq[:n]
        spec = [cache.dense_kv(i) for i in range(len(plain))]
        row[name] = {"vs_prefill_abs": worst, "same_text": same,
                     "vs_plain": difference(spec, plain, n) if same else None}
    return row


def run(n_prompts: int, tokens: int, dtypes: list[str], log: Any = print) -> dict[str, Any]:
    from specviz.models import load_default_pair

    result: dict[str, Any] = {"prompts": n_prompts, "tokens": tokens, "threads": torch.get_num_threads(),
                              "loadavg_start": os.getloadavg(), "dtypes": {}}
    for dtype in dtypes:
        pair = load_default_pair(dtype=dtype)
        rows = []
        for i, prompt in enumerate(prompt_set(pair.tokenizer, "natural", n_prompts)):
            rows.append(one_prompt(pair, prompt, tokens))
            log(f"{dtype} prompt {i + 1}/{n_prompts}: plain vs prefill {rows[-1]['plain_vs_prefill']['abs']:.3g}, "
                f"chain {rows[-1]['chain']['vs_prefill_abs']:.3g}, tree {rows[-1]['tree']['vs_prefill_abs']:.3g}")
        result["dtypes"][dtype] = rows
    result["loadavg_end"] = os.getloadavg()
    return result


def _max(rows: list[dict[str, Any]], get: Any) -> float | None:
    vals = [v for v in (get(r) for r in rows) if v is not None]
    return max(vals) if vals else None


def markdown(result: dict[str, Any]) -> str:
    def g(x: float | None) -> str:
        return "—" if x is None else f"{x:.2g}"

    lines = [
        "## The cache invariant's floor: plain decoding against a fresh prefill",
        "",
        f"`python -m bench.invariant` — the default pair, feature head, T = 0, {result['prompts']} natural prompts × "
        f"{result['tokens']} tokens, {result['threads']} thread(s). Largest |K/V difference| over every layer, "
        "position and prompt; *rel* = ÷ the largest |K/V| of the reference. *plain* = transformers' DynamicCache, "
        "one token per forward (the decoder the invariant stands for); *vs prefill* = against a fresh prefill "
        "of the same sequence (for chain and tree: the largest `check_invariant` value over every cycle); "
        "*vs plain* = the speculative decoder's target cache at the end against the plain decoder's.",
        "",
        "| dtype | plain vs prefill | rel | chain vs prefill | chain vs plain | rel | tree vs prefill | tree vs plain "
        "| rel | same text |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dtype, rows in result["dtypes"].items():
        same = all(r[s]["same_text"] for r in rows for s in SHAPES)
        lines.append(
            f"| {dtype} | {g(_max(rows, lambda r: r['plain_vs_prefill']['abs']))} "
            f"| {g(_max(rows, lambda r: r['plain_vs_prefill']['rel']))} "
            + "".join(
                f"| {g(_max(rows, lambda r, s=s: r[s]['vs_prefill_abs']))} "
                f"| {g(_max(rows, lambda r, s=s: r[s]['vs_plain'] and r[s]['vs_plain']['abs']))} "
                f"| {g(_max(rows, lambda r, s=s: r[s]['vs_plain'] and r[s]['vs_plain']['rel']))} "
                for s in SHAPES
            )
            + f"| {'yes' if same else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.invariant", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--into", type=Path, help="a docs directory: the table into benchmarks.md/.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = run(args.prompts, args.tokens, [d for d in args.dtypes.split(",") if d], log=Log())
    separate.publish(NAME, markdown(result), result, args.json, args.into)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
