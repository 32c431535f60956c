"""Section 5 — memory: KV bytes allocated vs bytes that hold valid positions, after a long run.

For each layout and paged rollback policy, one long speculative run of the default pair (K = 8,
temperature 1: many rejections, so many rollbacks) and then, for each model's cache:

  allocated   bytes of the K/V tensors that exist: caches are sized for what the run can reach
              (prompt + max_new_tokens + K + 1, whole pages) and grow on demand, so this is no
              longer `max_context` rows up front;
  limit       what preallocating for `max_context` (or the pool's cap) would take: the old sizing;
  held        bytes the sequence owns: the whole buffer (contiguous), or its block-table blocks
              (paged) — this is what a shared pool could hand to other sequences;
  valid       bytes of positions 0..L-1, the only ones ever read;
  waste       1 − valid/held (internal fragmentation: stale slots in the last block, and under
              policy "keep" whole blocks kept for positions that were rolled back);
  extra       blocks held beyond ceil(L / page_size) after each cycle's rollback, averaged over
              cycles (0 under "free" by construction; what "keep" trades for not re-allocating).

Plus one session at the app's defaults (`app_defaults`: the default prompt through the chat
template, K = 5, 128 new tokens, paged, page 16, policy "free", T = 1), the per-session KV bound
of issue 10 (<= 16 MiB). `python -m bench.memory` runs that row alone.

Peak RSS of the whole suite is reported by the driver after every section.
"""

from __future__ import annotations

from typing import Any

from specviz import SpeculativeDecoder

from .common import Log, Settings, current_rss_mb
from .systems import spec_config

CASES = (("contiguous", "free"), ("paged", "free"), ("paged", "keep"))


# The app's sidebar defaults (app.py init_state / DEFAULT_PROMPT), repeated here so that the
# benchmark does not import Streamlit.
APP_PROMPT = "Explain in a few sentences why the sky is blue during the day and red at sunset."
APP_SETTINGS = dict(k=5, temperature=1.0, max_new_tokens=128, cache_layout="paged", page_size=16,
                    free_policy="free", max_context=2048, seed=0)
MIB = 2**20


def cache_bytes(cache: Any) -> dict[str, Any]:
    mem = cache.memory_bytes()
    valid, held, allocated = mem.valid_bytes, mem.held_bytes, mem.allocated_bytes
    paged = cache.layout == "paged"
    return {"seq_len": cache.get_seq_length(), "bytes_per_position": mem.bytes_per_position,
            "allocated_bytes": allocated, "held_bytes": held, "valid_bytes": valid, "limit_bytes": mem.limit_bytes,
            "waste_of_held": 1 - valid / held if held else None,
            "valid_of_allocated": valid / allocated if allocated else None,
            "blocks_held": len(cache.table) if paged else None,
            "blocks_needed": _blocks_needed(cache) if paged else None}


def _blocks_needed(cache: Any) -> int:
    """ceil(L / page_size): the blocks a paged cache of length L cannot do without."""
    return -(-cache.get_seq_length() // cache.page_size)


def run(pair: Any, prompts: list[list[int]], s: Settings, log: Log) -> dict[str, Any]:
    out = []
    for layout, policy in CASES:
        cfg = spec_config(8, 1, s.memory_tokens, layout, False, free_policy=policy)
        rss0 = current_rss_mb()
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(prompts[0])
        dec.eos_ids = frozenset()  # a long run: do not stop at the end of the answer
        caches = {"target": dec.target_cache, "draft": dec.draft_cache}
        paged = caches if layout == "paged" else {}
        peak_blocks = {"target": 0, "draft": 0}
        extra_blocks = {"target": 0, "draft": 0}  # summed over cycles: blocks held beyond ceil(L / page)
        cycles = 0
        while not dec.finished:
            dec.step()
            cycles += 1
            for role, cache in paged.items():
                peak_blocks[role] = max(peak_blocks[role], len(cache.table))
                extra_blocks[role] += len(cache.table) - _blocks_needed(cache)
        row = {"layout": layout, "policy": policy if layout == "paged" else "-", "cycles": cycles,
               "new_tokens": len(dec.committed) - len(prompts[0]), "rss_delta_mb": current_rss_mb() - rss0,
               **{role: cache_bytes(cache) for role, cache in caches.items()}}
        for role in paged:
            row[role]["peak_blocks_held"] = peak_blocks[role]
            row[role]["mean_extra_blocks_after_rollback"] = extra_blocks[role] / cycles if cycles else None
        out.append(row)
        log(f"memory: {layout}/{row['policy']}: target valid {row['target']['valid_bytes'] / 2**20:.1f} MiB of "
            f"{row['target']['held_bytes'] / 2**20:.1f} held, {row['target']['allocated_bytes'] / 2**20:.1f} allocated")
        del dec
    apps = app_defaults_session(pair)
    log(f"memory: app defaults ({apps['prompt_tokens']} + {apps['new_tokens']} tokens): KV per session "
        f"{apps['allocated_bytes'] / MIB:.2f} MiB allocated (peak {apps['peak_allocated_bytes'] / MIB:.2f}), "
        f"{apps['held_bytes'] / MIB:.2f} held, {apps['valid_bytes'] / MIB:.2f} valid; "
        f"{apps['limit_bytes'] / MIB:.1f} MiB if preallocated for max_context")
    return {"runs": out, "max_context": spec_config(8, 1, 1, "paged", False).max_context, "app_defaults": apps}


def app_defaults_session(pair: Any, prompt: str = APP_PROMPT, **changes: Any) -> dict[str, Any]:
    """KV bytes of one session at the app's defaults, run to its end (EOS or max_new_tokens):
    per cache and summed over the session's caches, with the peak allocation over the run."""
    from specviz import DecodeConfig
    from specviz.cli import encode_prompt
    from specviz.models import preferred_proposer

    cfg = DecodeConfig(proposer=preferred_proposer(pair), **{**APP_SETTINGS, **changes})
    ids = encode_prompt(pair.tokenizer, prompt, chat=True)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(ids)
    peak = 0
    while not dec.finished:
        dec.step()
        peak = max(peak, sum(c.memory_bytes().allocated_bytes for c in _caches(dec).values()))
    per_cache = {role: cache_bytes(c) for role, c in _caches(dec).items()}
    totals = {key: sum(c[key] for c in per_cache.values())
              for key in ("allocated_bytes", "held_bytes", "valid_bytes", "limit_bytes")}
    return {"proposer": cfg.proposer, "settings": {**APP_SETTINGS, **changes}, "prompt_tokens": len(ids),
            "new_tokens": len(dec.committed) - len(ids), "finish_reason": dec.finish_reason, **totals,
            "peak_allocated_bytes": peak, "caches": per_cache}


def _caches(dec: SpeculativeDecoder) -> dict[str, Any]:
    return {role: c for role, c in (("target", dec.target_cache), ("draft", dec.draft_cache)) if c is not None}


def main() -> None:
    """`python -m bench.memory`: the app-defaults row alone, as JSON (one short run)."""
    import json

    import torch

    import specviz

    torch.set_num_threads(1)
    row = app_defaults_session(specviz.load_default_pair())
    mib = {k: round(v / MIB, 3) for k, v in row.items() if k.endswith("_bytes")}
    print(json.dumps({**row, "MiB": mib}, indent=1))


if __name__ == "__main__":
    main()
