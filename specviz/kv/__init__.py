"""KV caches that Hugging Face models write into directly, in two layouts.

* `ContiguousKVCache` (contiguous.py): a preallocated buffer per layer and a write pointer.
* `PagedKVCache` (paged.py): vLLM-style blocks from a `BlockPool`, found through a block table,
  with two rollback policies ("free" and "keep").

Both are `SpecvizCache`s (base.py): `transformers.cache_utils.Cache` subclasses for one
sequence, with `reserve` / `truncate`, `dense_kv`, an event log and cheap snapshots.

    cache = create_cache(model, layout="paged", page_size=16, policy="free", max_len=2048)
    cache.reserve(ids, phase="prefill")
    model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
"""

from __future__ import annotations

import torch

from specviz.errors import ConfigError
from specviz.kv.base import SpecvizCache, SpecvizLayer, num_attention_layers
from specviz.kv.contiguous import ContiguousKVCache
from specviz.kv.paged import POLICIES, BlockPool, BlockTable, KVBlock, PagedKVCache

LAYOUTS = ("paged", "contiguous")

__all__ = [
    "LAYOUTS",
    "POLICIES",
    "BlockPool",
    "BlockTable",
    "ContiguousKVCache",
    "KVBlock",
    "PagedKVCache",
    "SpecvizCache",
    "SpecvizLayer",
    "create_cache",
]


def create_cache(
    model: torch.nn.Module,
    layout: str = "paged",
    *,
    page_size: int = 16,
    policy: str = "free",
    max_len: int = 2048,
    num_blocks: int | None = None,
) -> SpecvizCache:
    """An empty one-sequence cache for `model` (one layer entry per decoder layer).

    `num_blocks=None` sizes the paged pool to hold `max_len` positions.
    """
    num_layers = num_attention_layers(model)
    if layout == "contiguous":
        return ContiguousKVCache(num_layers, max_len=max_len)
    if layout == "paged":
        return PagedKVCache(
            num_layers, max_len=max_len, page_size=page_size, policy=policy, num_blocks=num_blocks
        )
    raise ConfigError(f"cache layout must be one of {LAYOUTS}, got {layout!r}")
