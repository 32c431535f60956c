"""Section 4 — what the paged layout costs, and how it grows with the context.

specviz's paged cache hands Hugging Face attention dense K/V, so every forward pass *gathers*
positions 0..L-1 of every layer out of the block pool (`PagedLayer.gather`, an `index_select`
over slot ids), where the contiguous cache returns a slice view of its buffer at no cost. That
copy is O(L) bytes per layer per forward, so its share grows with the context length.

The context sweep uses a synthetic model of realistic shape with random weights (SmolLM2-135M's
shape: 30 layers, 3 KV heads of 64, hidden 576, vocab 49,152), because the point is the cost of
moving K/V, not what the model says. Caches are filled to L positions with random K/V directly
(a 4096-token prefill would take minutes on this CPU and measure nothing extra); the pool's free
list is shuffled first so the block table is scattered, as after a long run. At each L, for both
layouts, interleaved:

  kv_read_ms   the cache's own work in one decode step: every layer writes 1 position and reads
               back L+1 (what `update()` does inside the forward), no model math;
  decode_ms    a full one-token forward of the model;
  verify_ms    a full forward over 5 tokens (a K = 4 verify pass).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from specviz.runtime import forward

from .common import Log, Settings, median, summary
from .gpu import DRAFT_SHAPE, filled_cache

SHAPES = {
    "smollm2": DRAFT_SHAPE,  # SmolLM2-135M(-Instruct): the default target's shape
    "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, tie_word_embeddings=False),
}
METRICS = ("kv_read_ms", "decode_ms", "verify_ms")


def synthetic_model(shape: str, max_positions: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**SHAPES[shape], max_position_embeddings=max_positions, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    return LlamaForCausalLM(cfg).eval().requires_grad_(False)


def kv_read_ms(cache: Any, model: Any) -> float:
    cfg = model.config
    kv = torch.randn(1, cfg.num_key_value_heads, 1, cfg.hidden_size // cfg.num_attention_heads)
    length = cache.get_seq_length()
    with torch.inference_mode():
        t0 = time.perf_counter()
        cache.reserve([0], "decode")
        for layer in cache.layers:
            layer.update(kv, kv)
        dt = time.perf_counter() - t0
    cache.truncate(length, "rollback")
    return 1000 * dt


def forward_ms(cache: Any, model: Any, n: int, first: int = 1, phase: str = "decode") -> float:
    """ms of one forward over n token ids first.. at the cache's end; the cache is rolled back after."""
    length = cache.get_seq_length()
    t0 = time.perf_counter()
    forward(model, cache, list(range(first, first + n)), phase, last_only=(n == 1))
    dt = time.perf_counter() - t0
    cache.truncate(length, "rollback")
    return 1000 * dt


def run(s: Settings, log: Log) -> dict[str, Any]:
    max_len = max(s.contexts) + 16
    log(f"paging: building the synthetic {s.synthetic} model")
    model = synthetic_model(s.synthetic, max_len)
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    bytes_per_position = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * 4
    rows = []
    for length in s.contexts:
        caches = {layout: filled_cache(model, layout, length, max_len) for layout in ("contiguous", "paged")}
        for cache in caches.values():  # warm-up
            forward_ms(cache, model, 1)
        got: dict[str, dict[str, list[float]]] = {lay: {m: [] for m in METRICS} for lay in caches}
        for r in range(s.context_reps):
            order = list(caches) if r % 2 == 0 else list(reversed(caches))
            for layout in order:
                got[layout]["kv_read_ms"].append(kv_read_ms(caches[layout], model))
                got[layout]["decode_ms"].append(forward_ms(caches[layout], model, 1))
                got[layout]["verify_ms"].append(forward_ms(caches[layout], model, 5))
        row: dict[str, Any] = {"context": length, "kv_bytes_read_per_step": bytes_per_position * (length + 1)}
        for layout, metrics in got.items():
            for name, vals in metrics.items():
                row[f"{layout}_{name}"] = summary(vals)
        for name in METRICS:
            c = median(got["contiguous"][name])
            p = median(got["paged"][name])
            row[f"paged_over_contiguous_{name}"] = p / c if c else None
        rows.append(row)
        log(f"paging: L={length}: decode contiguous {row['contiguous_decode_ms']['median']:.1f} ms, "
            f"paged {row['paged_decode_ms']['median']:.1f} ms; "
            f"kv read paged {row['paged_kv_read_ms']['median']:.2f} ms")
        del caches
    return {"model": {"shape": s.synthetic, **SHAPES[s.synthetic]}, "bytes_per_position": bytes_per_position,
            "rows": rows}
