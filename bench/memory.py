"""Section 5 — memory: KV bytes allocated vs bytes that hold valid positions, after a long run.

For each layout and paged rollback policy, one long speculative run of the default pair (K = 8,
temperature 1: many rejections, so many rollbacks) and then, for each model's cache:

  allocated   bytes of the K/V tensors that exist (the contiguous buffer is `max_context` rows up
              front; the paged *pool* is sized for `max_context` too unless `num_blocks` is given);
  held        bytes the sequence owns: the whole buffer (contiguous), or its block-table blocks
              (paged) — this is what a shared pool could hand to other sequences;
  valid       bytes of positions 0..L-1, the only ones ever read;
  waste       1 − valid/held (internal fragmentation: stale slots in the last block, and under
              policy "keep" whole blocks kept for positions that were rolled back);
  extra       blocks held beyond ceil(L / page_size) after each cycle's rollback, averaged over
              cycles (0 under "free" by construction; what "keep" trades for not re-allocating).

Peak RSS of the whole suite is reported by the driver after every section.
"""

from __future__ import annotations

from typing import Any

from specviz import SpeculativeDecoder

from .common import Log, Settings, current_rss_mb
from .systems import spec_config

CASES = (("contiguous", "free"), ("paged", "free"), ("paged", "keep"))


def cache_bytes(cache: Any) -> dict[str, Any]:
    layers = [layer for layer in cache.layers if getattr(layer, "is_initialized", False)]
    allocated = sum(layer.keys.nbytes + layer.values.nbytes for layer in layers)
    if cache.layout == "paged":
        slots = cache.pool.num_blocks * cache.page_size
        held_slots = len(cache.table) * cache.page_size
    else:
        slots = held_slots = cache.max_len
    per_position = allocated // slots if slots else 0
    valid = cache.get_seq_length() * per_position
    held = held_slots * per_position
    return {
        "seq_len": cache.get_seq_length(),
        "bytes_per_position": per_position,
        "allocated_bytes": allocated,
        "held_bytes": held,
        "valid_bytes": valid,
        "waste_of_held": 1 - valid / held if held else None,
        "valid_of_allocated": valid / allocated if allocated else None,
        "blocks_held": len(cache.table) if cache.layout == "paged" else None,
        "blocks_needed": -(-cache.get_seq_length() // cache.page_size) if cache.layout == "paged" else None,
    }


def run(pair: Any, prompts: list[list[int]], s: Settings, log: Log) -> dict[str, Any]:
    out = []
    for layout, policy in CASES:
        cfg = spec_config(8, 1, s.memory_tokens, layout, False, free_policy=policy)
        rss0 = current_rss_mb()
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(prompts[0])
        dec.eos_ids = frozenset()  # a long run: do not stop at the end of the answer
        peak_blocks = {"target": 0, "draft": 0}
        extra_blocks = {"target": 0, "draft": 0}  # summed over cycles: blocks held beyond ceil(L / page)
        cycles = 0
        while not dec.finished:
            dec.step()
            cycles += 1
            if layout == "paged":
                peak_blocks["target"] = max(peak_blocks["target"], len(dec.target_cache.table))
                peak_blocks["draft"] = max(peak_blocks["draft"], len(dec.draft_cache.table))
                for role, cache in (("target", dec.target_cache), ("draft", dec.draft_cache)):
                    extra_blocks[role] += len(cache.table) - -(-cache.get_seq_length() // cache.page_size)
        row = {
            "layout": layout,
            "policy": policy if layout == "paged" else "-",
            "cycles": cycles,
            "new_tokens": len(dec.committed) - len(prompts[0]),
            "rss_delta_mb": current_rss_mb() - rss0,
            "target": cache_bytes(dec.target_cache),
            "draft": cache_bytes(dec.draft_cache),
        }
        if layout == "paged":
            row["target"]["peak_blocks_held"] = peak_blocks["target"]
            row["draft"]["peak_blocks_held"] = peak_blocks["draft"]
            for role in ("target", "draft"):
                row[role]["mean_extra_blocks_after_rollback"] = extra_blocks[role] / cycles if cycles else None
        out.append(row)
        log(
            f"memory: {layout}/{row['policy']}: target valid {row['target']['valid_bytes'] / 2**20:.1f} MiB of "
            f"{row['target']['held_bytes'] / 2**20:.1f} held, {row['target']['allocated_bytes'] / 2**20:.1f} allocated"
        )
        del dec
    return {"runs": out, "max_context": spec_config(8, 1, 1, "paged", False).max_context}
