"""KV caches that Hugging Face models write into directly, in two layouts (docs/design.md §3, "The caches").

`ContiguousKVCache` (a buffer and a write pointer) and `PagedKVCache` (vLLM-style blocks from a
`BlockPool` through a block table, rollback policies "free" and "keep") are both `SpecvizCache`s (base.py).

    cache = create_cache(model, layout="paged", page_size=16, policy="free", max_len=2048, initial_len=180)
    cache.reserve(ids, phase="prefill")
    model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
"""

from __future__ import annotations

import torch

from specviz.config import LAYOUTS
from specviz.errors import ConfigError
from specviz.kv.base import DEFAULT_INITIAL_LEN, KVMemory, SpecvizCache, SpecvizLayer, num_attention_layers
from specviz.kv.contiguous import ContiguousKVCache
from specviz.kv.paged import POLICIES, BlockPool, BlockTable, KVBlock, PagedKVCache

__all__ = ["LAYOUTS", "POLICIES", "BlockPool", "DEFAULT_INITIAL_LEN", "BlockTable", "ContiguousKVCache", "KVBlock",
           "KVMemory", "PagedKVCache", "SpecvizCache", "SpecvizLayer", "create_cache"]


def create_cache(model: torch.nn.Module, layout: str = "paged", *, page_size: int = 16, policy: str = "free",
                 max_len: int = 2048, num_blocks: int | None = None, initial_len: int | None = None) -> SpecvizCache:
    """An empty one-sequence cache for `model` (one layer entry per decoder layer), with storage for
    `initial_len` positions (None: `DEFAULT_INITIAL_LEN`) that grows on demand up to `max_len`; a
    paged pool's cap is the blocks `max_len` needs, or `num_blocks` when given."""
    num_layers = num_attention_layers(model)
    if layout == "contiguous":
        return ContiguousKVCache(num_layers, max_len=max_len, initial_len=initial_len)
    if layout == "paged":
        return PagedKVCache(num_layers, max_len=max_len, page_size=page_size, policy=policy, num_blocks=num_blocks,
                            initial_len=initial_len)
    raise ConfigError(f"cache layout must be one of {LAYOUTS}, got {layout!r}")
