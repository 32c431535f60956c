"""Both KV layouts compute exactly what transformers.DynamicCache computes, and fail cleanly.

Each scenario drives a tiny random model through prefill, single-token decode, a multi-token
append (like the verify pass), truncate (rollback) and re-append of different tokens, once with
a specviz cache and once with a DynamicCache, comparing logits and the dense K/V of every layer
after every step.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import ARCHS, tiny_model
from transformers import DynamicCache

from specviz.errors import CacheCapacityError, ConfigError, PoolExhaustedError
from specviz.kv import BlockPool, ContiguousKVCache, KVBlock, PagedKVCache, SpecvizCache, create_cache

ATOL = 1e-5
VOCAB = 64

LAYOUTS = [
    pytest.param(dict(layout="contiguous"), id="contiguous"),
    *[
        pytest.param(dict(layout="paged", page_size=ps, policy=policy), id=f"paged{ps}-{policy}")
        for ps in (1, 3, 16)
        for policy in ("free", "keep")
    ],
]


class Pair:
    """A specviz cache and a DynamicCache fed the same tokens, compared after every forward."""

    def __init__(self, model, **cache_kwargs):
        self.model = model
        self.cache = create_cache(model, max_len=64, **cache_kwargs)
        self.ref = DynamicCache(config=model.config)

    @torch.no_grad()
    def feed(self, ids: list[int], phase: str = "decode", reserve: bool = True) -> None:
        if reserve:
            self.cache.reserve(ids, phase)
        x = torch.tensor([ids])
        ours = self.model(x, past_key_values=self.cache, use_cache=True).logits
        ref = self.model(x, past_key_values=self.ref, use_cache=True).logits
        torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0)
        self.check()

    def truncate(self, new_len: int) -> None:
        removed = self.cache.get_seq_length() - new_len
        self.cache.truncate(new_len, "rollback")
        self.ref.crop(-removed)
        self.check()

    def check(self) -> None:
        length = self.ref.get_seq_length()
        assert self.cache.get_seq_length() == length
        for i, layer in enumerate(self.ref.layers):
            keys, values = self.cache.dense_kv(i)
            assert keys.shape == layer.keys.shape == (1, keys.shape[1], length, keys.shape[-1])
            torch.testing.assert_close(keys, layer.keys, atol=ATOL, rtol=0)
            torch.testing.assert_close(values, layer.values, atol=ATOL, rtol=0)


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("cache_kwargs", LAYOUTS)
def test_parity_with_dynamic_cache(tiny_lm, cache_kwargs):
    pair = Pair(tiny_lm, **cache_kwargs)
    pair.feed(tokens(6, 0), "prefill")  # prefill: positions 0..5
    for step in range(3):  # single-token decode: 6, 7, 8
        pair.feed(tokens(1, 10 + step))
    pair.feed(tokens(5, 1), "verify")  # multi-token append on a non-empty cache: 9..13
    pair.truncate(10)  # reject the last 4
    pair.feed(tokens(4, 2), "verify")  # different tokens into the stale slots: 10..13
    pair.truncate(14)  # full acceptance: nothing removed
    pair.feed(tokens(1, 3))
    pair.truncate(4)  # deep rollback into the prefill's blocks
    pair.feed(tokens(7, 4), "verify")
    pair.feed(tokens(1, 5), reserve=False)  # a forward without reserve() still works
    assert pair.cache.token_ids[-1] == -1
    pair.truncate(0)
    pair.feed(tokens(3, 6), "prefill")  # the emptied cache starts over


@pytest.mark.parametrize("cache_kwargs", LAYOUTS[:2] + LAYOUTS[-2:])
def test_generate_greedy_matches(tiny_llama, cache_kwargs):
    """HF generate() writes into a specviz cache without reserve() and gets the same tokens."""
    prompt = torch.tensor([tokens(5, 7)])
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    ref = tiny_llama.generate(prompt, **kwargs)
    cache = create_cache(tiny_llama, max_len=64, **cache_kwargs)
    ours = tiny_llama.generate(prompt, past_key_values=cache, **kwargs)
    assert ours.tolist() == ref.tolist()
    assert cache.get_seq_length() == ref.shape[1] - 1


def test_token_ids_and_events_contiguous(tiny_gpt2):
    cache = create_cache(tiny_gpt2, "contiguous", max_len=32)
    assert isinstance(cache, ContiguousKVCache) and cache.layout == "contiguous" and cache.max_len == 32
    pair = Pair(tiny_gpt2, layout="contiguous")
    pair.feed([5, 6, 7], "prefill")
    pair.feed([8, 9], "verify")
    pair.truncate(4)
    events = pair.cache.drain_events()
    assert [(e.kind, e.phase, e.start, e.end) for e in events] == [
        ("append", "prefill", 0, 3),
        ("pointer", "prefill", 0, 3),
        ("append", "verify", 3, 5),
        ("pointer", "verify", 3, 5),
        ("truncate", "rollback", 5, 4),
        ("pointer", "rollback", 5, 4),
    ]
    assert pair.cache.drain_events() == []
    assert pair.cache.token_ids == [5, 6, 7, 8]
    snap = pair.cache.snapshot(num_committed=3)
    assert (snap.seq_len, snap.num_committed, snap.capacity) == (4, 3, 64)
    assert snap.slot_tokens == (5, 6, 7, 8, 9)
    assert [snap.slot_state(s) for s in range(6)] == ["committed"] * 3 + ["provisional", "stale", "free"]


def test_events_and_snapshot_paged_free(tiny_llama):
    pair = Pair(tiny_llama, layout="paged", page_size=2, policy="free")
    cache = pair.cache
    assert isinstance(cache, PagedKVCache) and cache.layout == "paged" and cache.pool.num_blocks == 32
    pair.feed([5, 6, 7], "prefill")  # blocks 0, 1
    pair.feed([8, 9, 10], "verify")  # positions 3..5: block 1 (partly filled) + block 2
    assert cache.block_table == [0, 1, 2]
    pair.truncate(3)  # block 2 holds only removed positions -> freed; block 1 keeps a stale slot
    assert cache.block_table == [0, 1]
    assert cache.pool.free_block_ids[-1] == 2  # returned to the tail of the free list
    events = cache.drain_events()
    assert [(e.kind, e.start, e.end, e.blocks) for e in events] == [
        ("append", 0, 3, ()),
        ("alloc", -1, -1, (0, 1)),
        ("append", 3, 6, ()),
        ("alloc", -1, -1, (2,)),
        ("truncate", 6, 3, ()),
        ("free", -1, -1, (2,)),
    ]
    snap = cache.snapshot(num_committed=2)
    assert snap.block_table == (0, 1) and snap.policy == "free" and snap.page_size == 2
    assert snap.num_free_blocks == 30
    # slots 0..3 = block 0 (positions 0, 1) and block 1 (positions 2, stale 3); block 2 is free
    assert [snap.slot_state(s) for s in range(6)] == [
        "committed",
        "committed",
        "provisional",
        "stale",
        "free",
        "free",
    ]
    assert snap.slot_tokens[:6] == (5, 6, 7, 8, 9, 10)
    pair.feed([11, 12, 13], "verify")  # a fresh block comes from the head of the free list
    assert cache.block_table == [0, 1, 3]


def test_events_paged_keep(tiny_qwen2):
    pair = Pair(tiny_qwen2, layout="paged", page_size=2, policy="keep")
    cache = pair.cache
    pair.feed([5, 6, 7, 8, 9], "prefill")  # blocks 0, 1, 2
    pair.truncate(1)
    assert cache.block_table == [0, 1, 2]  # nothing freed
    pair.feed([10, 11, 12, 13, 14, 15], "verify")  # positions 1..6: rewrite 0; reuse 1, 2; alloc 3
    events = cache.drain_events()
    assert [(e.kind, e.start, e.end, e.blocks) for e in events] == [
        ("append", 0, 5, ()),
        ("alloc", -1, -1, (0, 1, 2)),
        ("truncate", 5, 1, ()),
        ("append", 1, 7, ()),
        ("reuse", -1, -1, (1, 2)),
        ("alloc", -1, -1, (3,)),
    ]
    assert cache.block_table == [0, 1, 2, 3]
    assert cache.token_ids == [5, 10, 11, 12, 13, 14, 15]


# ---- errors leave everything unchanged -------------------------------------------------


def state(cache: SpecvizCache):
    return (
        cache.get_seq_length(),
        cache.token_ids,
        cache.snapshot(cache.get_seq_length()),
        list(cache.events),
    )


def test_contiguous_capacity_error(tiny_llama):
    pair = Pair(tiny_llama, layout="contiguous")
    pair.cache = create_cache(tiny_llama, "contiguous", max_len=8)
    pair.feed(tokens(6, 0), "prefill")
    before = state(pair.cache)
    with pytest.raises(CacheCapacityError, match="contiguous KV cache full"):
        pair.cache.reserve([1, 2, 3], "verify")
    assert state(pair.cache) == before
    pair.feed([4, 5], "verify")  # exactly full still works
    assert pair.cache.get_seq_length() == 8
    with pytest.raises(CacheCapacityError):  # a forward without reserve fails the same way
        tiny_llama(torch.tensor([[3]]), past_key_values=pair.cache, use_cache=True)
    pair.truncate(6)
    pair.feed([6, 7], "verify")


@pytest.mark.parametrize("policy", ["free", "keep"])
def test_pool_exhausted_error(tiny_llama, policy):
    pair = Pair(tiny_llama, layout="paged", page_size=2, policy=policy)
    pair.cache = create_cache(tiny_llama, "paged", page_size=2, policy=policy, num_blocks=3)
    pair.feed(tokens(5, 0), "prefill")  # 3 blocks, the pool is empty
    before = state(pair.cache)
    free_before = pair.cache.pool.free_block_ids
    with pytest.raises(PoolExhaustedError, match=r"need 1 new block.* 0 of 3 are free"):
        pair.cache.reserve([1, 2], "verify")
    assert state(pair.cache) == before
    assert pair.cache.pool.free_block_ids == free_before
    pair.feed([3], "decode")  # fills the last slot of block 2
    pair.truncate(2)
    assert len(pair.cache.block_table) == (1 if policy == "free" else 3)
    pair.feed(tokens(4, 1), "verify")  # room again (fresh or reused blocks)
    assert pair.cache.max_len == 6
    with pytest.raises(PoolExhaustedError):
        pair.cache.reserve([1], "decode")


def test_paged_max_len_error(tiny_gpt2):
    cache = create_cache(tiny_gpt2, "paged", page_size=4, max_len=5)
    assert (cache.max_len, cache.pool.num_blocks) == (5, 2)
    with pytest.raises(CacheCapacityError, match="max_len=5") as info:
        cache.reserve(list(range(6)), "prefill")
    assert not isinstance(info.value, PoolExhaustedError)
    assert cache.block_table == [] and cache.pool.num_free_blocks == 2 and cache.drain_events() == []


def test_bad_use_is_refused(tiny_llama):
    with pytest.raises(ConfigError):
        create_cache(tiny_llama, "ring")
    with pytest.raises(ConfigError):
        create_cache(tiny_llama, "paged", policy="lru")
    with pytest.raises(ConfigError):
        create_cache(tiny_llama, "paged", page_size=0)
    cache = create_cache(tiny_llama, "paged", page_size=4)
    with pytest.raises(ConfigError, match="batch size"):
        tiny_llama(torch.zeros(2, 3, dtype=torch.long), past_key_values=cache, use_cache=True)
    cache = create_cache(tiny_llama, "paged", page_size=4)
    cache.reserve([1, 2], "prefill")
    with pytest.raises(ValueError, match="reserve"):
        tiny_llama(torch.tensor([[1, 2, 3]]), past_key_values=cache, use_cache=True)
    with pytest.raises(ValueError):
        cache.truncate(1, "rollback")  # longer than the cache
    cache.truncate(0, "rollback")  # cancels the unwritten reservation
    assert cache.block_table == [] and cache.pool.num_free_blocks == cache.pool.num_blocks


def test_sliding_window_models_are_refused():
    model = tiny_model("qwen2")
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    with pytest.raises(ConfigError, match="full-attention"):
        create_cache(model, "contiguous")


def test_replaced_reservation(tiny_llama):
    """A reservation whose forward never ran is replaced by the next reserve()."""
    pair = Pair(tiny_llama, layout="paged", page_size=2, policy="free")
    pair.feed([5, 6, 7], "prefill")
    pair.cache.reserve([1, 2, 3, 4, 5], "verify")  # forward never happens
    assert len(pair.cache.block_table) == 4
    pair.feed([8], "decode")
    assert pair.cache.block_table == [0, 1]
    assert pair.cache.pool.num_free_blocks == pair.cache.pool.num_blocks - 2


def test_block_pool():
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(3)
    assert [b.block_id for b in blocks] == [0, 1, 2] and pool.num_free_blocks == 1
    pool.free_blocks(blocks[1:])
    assert pool.free_block_ids == (3, 1, 2)
    with pytest.raises(RuntimeError, match="double free"):
        pool.free_blocks([blocks[1]])
    with pytest.raises(PoolExhaustedError):
        pool.get_new_blocks(4)
    assert isinstance(blocks[0], KVBlock) and blocks[0].ref_cnt == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("cache_kwargs", [LAYOUTS[0], LAYOUTS[3]])
def test_parity_on_cuda(arch, cache_kwargs):
    model = tiny_model(arch).cuda()
    pair = Pair(model, **cache_kwargs)
    pair.feed(tokens(6, 0), "prefill")
    pair.feed(tokens(4, 1), "verify")
    pair.truncate(7)
    pair.feed(tokens(3, 2), "verify")
    keys, _ = pair.cache.dense_kv(0)
    assert keys.device.type == "cuda"
    assert math.isfinite(keys.abs().max().item())


@pytest.mark.parametrize("cache_kwargs", [LAYOUTS[0], LAYOUTS[3], LAYOUTS[4]])
def test_forward_that_fails_part_way(tiny_llama, cache_kwargs):
    """An exception after some layers wrote: truncate() undoes the reservation, and the cache
    works on (the engine's forward() does exactly this)."""
    pair = Pair(tiny_llama, **cache_kwargs)
    pair.feed(tokens(5, 0), "prefill")
    before = (
        pair.cache.get_seq_length(),
        pair.cache.block_table if cache_kwargs["layout"] == "paged" else None,
    )

    def boom(*args):
        raise KeyboardInterrupt("stop")

    handle = tiny_llama.model.layers[1].register_forward_pre_hook(boom)
    try:
        pair.cache.reserve([7, 8, 9], "verify")
        with pytest.raises(KeyboardInterrupt):
            tiny_llama(torch.tensor([[7, 8, 9]]), past_key_values=pair.cache, use_cache=True)
        assert pair.cache.layers_done == {0}
        pair.cache.truncate(5, "verify")
    finally:
        handle.remove()
    after = (
        pair.cache.get_seq_length(),
        pair.cache.block_table if cache_kwargs["layout"] == "paged" else None,
    )
    assert after == before
    pair.feed([10, 11], "verify")


def test_inference_mode_then_no_grad(tiny_gpt2):
    """Storage allocated under torch.inference_mode() can still be written outside it."""
    pair = Pair(tiny_gpt2, layout="paged", page_size=4)
    with torch.inference_mode():
        pair.feed(tokens(5, 0), "prefill")
    pair.feed(tokens(2, 1), "verify")  # Pair.feed runs under no_grad


def test_reset_returns_every_block(tiny_llama):
    cache = create_cache(tiny_llama, "paged", page_size=2, policy="keep")
    cache.reserve([1, 2, 3], "prefill")
    with torch.no_grad():
        tiny_llama(torch.tensor([[1, 2, 3]]), past_key_values=cache, use_cache=True)
    cache.truncate(1, "rollback")
    assert cache.block_table == [0, 1]  # "keep" holds them
    cache.drain_events()
    cache.reset()
    assert cache.get_seq_length() == 0 and cache.block_table == []
    assert cache.pool.num_free_blocks == cache.pool.num_blocks
    assert [(e.kind, e.blocks) for e in cache.drain_events()] == [("truncate", ()), ("free", (0, 1))]


def test_layer_count_follows_the_decoder_not_the_config():
    """An early-exit draft cut from a bigger model without updating its config still works."""
    model = tiny_model("llama", num_layers=3)
    model.model.layers = model.model.layers[:1]  # config still says 3 layers
    cache = create_cache(model, "paged", page_size=4)
    assert len(cache.layers) == 1
    with torch.no_grad():
        model(torch.tensor([[3, 4, 5]]), past_key_values=cache, use_cache=True)
    assert cache.get_seq_length() == 3
