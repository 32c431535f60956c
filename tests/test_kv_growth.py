"""Memory that fits the run (issue 10, part 1): caches are sized from what a run can reach and
grow on demand, through the real decoders.

* `start()` sizes every cache (target, draft model, feature head; paged and contiguous) for
  prompt + max_new_tokens + K + 1, rounded up to whole pages, not for `max_context`, and a run
  that keeps to its settings never grows.
* Raising K and max_new_tokens live grows the caches instead of failing, and the tokens are the
  ones a decoder sized for the bigger run from the start produces (greedy: the target's own
  greedy decoding), with every cache still equal to a fresh prefill.
* An explicit `num_blocks` stays a hard cap: growth stops there and the pool runs out with a
  clear error that changes nothing.
* `memory_bytes()` and the snapshots report allocated vs held vs valid bytes consistently.

The growth bookkeeping itself (random runs, bit-identical K/V) is property-tested in
test_paging_properties.py.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from engine_helpers import TOL, assert_invariant, make_pair
from tiny_models import tiny_model

from specviz import CycleTrace, DecodeConfig, SpeculativeDecoder
from specviz.autoregressive import AutoregressiveDecoder
from specviz.errors import CacheCapacityError, PoolExhaustedError
from specviz.kv import ContiguousKVCache, PagedKVCache, create_cache
from specviz.proposers import registry
from specviz.runtime import expected_reach
from specviz.trace import CacheEvent

PROMPT = [3, 17, 42, 5, 9, 28, 11]
PROPOSERS = registry.names()  # every proposer in the table
LAYOUTS = [("paged", 4, "free"), ("paged", 3, "keep"), ("contiguous", 16, "free")]


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama")


def caches(dec: SpeculativeDecoder) -> list:
    return [c for c in (dec.target_cache, dec.draft_cache) if c is not None]


def sized_for(positions: int, layout: str, page: int) -> int:
    """Slots a cache sized for `positions` allocates: whole pages for the paged layout."""
    return math.ceil(positions / page) * page if layout == "paged" else positions


def grow_events(traces: list[CycleTrace]) -> list[CacheEvent]:
    return [e for t in traces for e in (*t.target_events, *t.draft_events) if e.kind == "grow"]


@pytest.mark.parametrize("proposer", PROPOSERS)
@pytest.mark.parametrize(("layout", "page", "policy"), LAYOUTS)
def test_start_sizes_every_cache_for_the_run(pair, proposer, layout, page, policy):
    cfg = DecodeConfig(k=3, proposer=proposer, cache_layout=layout, page_size=page, free_policy=policy,
                       max_new_tokens=20, max_context=256)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    reach = len(PROMPT) + 20 + 3 + 1
    assert expected_reach(cfg, len(PROMPT)) == reach and expected_reach(cfg, len(PROMPT), 10) == 10
    for cache in caches(dec):
        assert cache.allocated_slots == sized_for(reach, layout, page) < 256
        assert cache.max_len == 256  # the growth limit is still the context
    traces = []
    while not dec.finished:
        traces.append(dec.step())
    assert len(dec.committed) == len(PROMPT) + 20
    assert grow_events(traces) == []  # the run kept to its settings: its sizing sufficed
    for cache in caches(dec):
        assert cache.allocated_slots == sized_for(reach, layout, page)
    assert_invariant(dec)


def test_a_reach_past_the_context_is_capped(pair):
    cfg = DecodeConfig(k=4, page_size=4, max_new_tokens=500, max_context=30)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    for cache in caches(dec):
        assert cache.allocated_slots == 32 and cache.max_len == 30  # ceil(30 / 4) blocks
    dec.generate()
    assert dec.finish_reason == "context_full" and len(dec.committed) == 30


@pytest.mark.parametrize("proposer", PROPOSERS)
@pytest.mark.parametrize(("layout", "page", "policy"), LAYOUTS)
def test_raising_k_and_max_new_tokens_live_grows_instead_of_failing(pair, proposer, layout, page, policy):
    """Start sized for 6 new tokens at K = 2, then raise both live: the caches grow (recorded as
    "grow" events), nothing fails, every cache stays exact, and at temperature 0 the text is the
    target's own greedy decoding of the longer run."""
    small = DecodeConfig(k=2, proposer=proposer, temperature=0.0, cache_layout=layout, page_size=page,
                         free_policy=policy, max_new_tokens=6, check_invariant=True)
    dec = SpeculativeDecoder(pair, small)
    dec.start(PROMPT)
    sized = {id(c): c.allocated_slots for c in caches(dec)}
    traces = [dec.step()]
    dec.update_config(small.replace(k=7, max_new_tokens=60))
    while not dec.finished:
        traces.append(dec.step())
    assert dec.finish_reason == "max_new_tokens" and len(dec.committed) == len(PROMPT) + 60
    grows = grow_events(traces)
    assert grows, "the caches had to grow"
    assert all(e.describe().startswith("grow the ") for e in grows)
    for cache in caches(dec):
        if cache.get_seq_length() > sized[id(cache)]:
            assert cache.allocated_slots > sized[id(cache)]
        assert cache.allocated_slots <= sized_for(cache.max_len, layout, page)
    assert max(max(t.invariant_max_abs_diff.values()) for t in traces) < TOL
    assert_invariant(dec)
    # The greedy reference: the target alone, decoding the same 60 tokens.
    ar = AutoregressiveDecoder(pair.target, small.replace(max_new_tokens=60))
    ar.start(PROMPT)
    assert dec.committed == PROMPT + ar.generate()


def test_autoregressive_decoder_is_sized_for_its_run_and_grows(pair):
    cfg = DecodeConfig(temperature=0.0, page_size=4, max_new_tokens=5)
    ar = AutoregressiveDecoder(pair.target, cfg)
    ar.start(PROMPT)
    reach = expected_reach(cfg, len(PROMPT))
    assert ar.cache.allocated_slots == sized_for(reach, "paged", 4)
    ar.step()
    ar.config = cfg.replace(max_new_tokens=40)  # a longer run than the cache was sized for
    ar.generate()
    assert len(ar.committed) == len(PROMPT) + 40
    assert ar.cache.allocated_slots >= ar.cache.get_seq_length() > reach
    reference = AutoregressiveDecoder(pair.target, cfg.replace(max_new_tokens=40))
    reference.start(PROMPT)
    reference.generate()
    assert ar.committed == reference.committed


def test_an_explicit_num_blocks_is_still_a_hard_cap(pair):
    """The pool starts below its cap (sized for the run), grows up to the cap as K and
    max_new_tokens rise, and then runs out with PoolExhaustedError, changing nothing."""
    cfg = DecodeConfig(k=2, page_size=2, num_blocks=10, max_new_tokens=3)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    target = dec.target_cache
    assert target.pool.num_blocks == math.ceil((len(PROMPT) + 3 + 2 + 1) / 2) == 7 < 10
    dec.update_config(cfg.replace(k=8, max_new_tokens=100))
    for _ in range(30):
        n = len(dec.committed)
        snap = target.snapshot(n)
        before = (dec.committed, target.get_seq_length(), dec.draft_cache.get_seq_length(), snap.block_table,
                  snap.free_blocks, target.pool.num_blocks, dec.draft_cache.pool.num_blocks)
        try:
            dec.step()
        except PoolExhaustedError as err:
            assert "of 10 are free" in str(err) and "raise num_blocks" in str(err)
            break
        assert target.pool.num_blocks <= 10 and dec.draft_cache.pool.num_blocks <= 10
    else:
        pytest.fail("a pool capped at 10 blocks of 2 must run out")
    snap = target.snapshot(len(dec.committed))
    after = (dec.committed, target.get_seq_length(), dec.draft_cache.get_seq_length(), snap.block_table,
             snap.free_blocks, target.pool.num_blocks, dec.draft_cache.pool.num_blocks)
    assert after == before
    assert target.pool.num_blocks == 10  # it grew to the cap, not past it
    assert math.ceil((n + 8) / 2) > 10  # and refused only because the verify pass needs more
    dec.update_config(dec.config.replace(k=1))
    if math.ceil((n + 1) / 2) <= 10:
        dec.step()  # a smaller K fits: the decoder kept working
    assert_invariant(dec)


def test_refused_reserve_does_not_grow_the_pool():
    cache = PagedKVCache(num_layers=2, max_len=100, page_size=2, num_blocks=5, initial_len=2)
    assert (cache.pool.num_blocks, cache.max_len) == (1, 10)
    with pytest.raises(PoolExhaustedError, match=r"need 6 new block.* 1 of 1 are free and the pool may grow by only 4"):
        cache.reserve(list(range(11)), "prefill")
    assert cache.pool.num_blocks == 1 and cache.events == [] and cache.block_table == []
    cache.reserve(list(range(10)), "prefill")  # exactly the cap
    assert cache.pool.num_blocks == 5 and cache.block_table == [0, 1, 2, 3, 4]
    assert [(e.kind, e.start, e.end, e.blocks) for e in cache.events] == [
        ("append", 0, 10, ()),
        ("grow", 1, 5, (1, 2, 3, 4)),  # max(1 + 4, 2 * 1), within the cap
        ("alloc", -1, -1, (0, 1, 2, 3, 4)),
    ]
    contiguous = ContiguousKVCache(num_layers=2, max_len=7, initial_len=3)
    with pytest.raises(CacheCapacityError, match="7 rows"):
        contiguous.reserve(list(range(8)), "prefill")
    assert contiguous.rows == 3 and contiguous.events == []


def test_grow_events_describe_themselves():
    assert CacheEvent("grow", "verify", 4, 8, blocks=(4, 5, 6, 7)).describe() == (
        "grow the block pool from 4 to 8 blocks (new block(s) [4, 5, 6, 7] join the free list; old blocks copied)"
    )
    assert "[8..23]" in CacheEvent("grow", "verify", 8, 24, blocks=tuple(range(8, 24))).describe()
    assert CacheEvent("grow", "prefill", 10, 20).describe() == "grow the buffer from 10 to 20 rows (old rows copied)"


@pytest.mark.parametrize(("layout", "page", "policy"), LAYOUTS)
def test_memory_bytes_allocated_held_valid(pair, layout, page, policy):
    cfg = DecodeConfig(k=4, cache_layout=layout, page_size=page, free_policy=policy, max_new_tokens=30,
                       max_context=256)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    traces = [dec.step() for _ in range(4)]
    config = pair.target.config
    per_position = 2 * config.num_hidden_layers * config.num_key_value_heads * (
        config.hidden_size // config.num_attention_heads
    ) * torch.finfo(torch.float32).bits // 8
    cache = dec.target_cache
    mem = cache.memory_bytes()
    length = cache.get_seq_length()
    assert mem.bytes_per_position == per_position
    assert mem.allocated_bytes == cache.allocated_slots * per_position
    assert mem.valid_bytes == length * per_position
    assert mem.limit_bytes == sized_for(256, layout, page) * per_position  # the old preallocation
    if layout == "paged":
        assert mem.held_bytes == len(cache.block_table) * page * per_position
        assert mem.valid_bytes <= mem.held_bytes < mem.valid_bytes + page * per_position * (
            1 if policy == "free" else cfg.k + 1
        )
    else:
        assert mem.held_bytes == mem.allocated_bytes
    assert mem.valid_bytes <= mem.held_bytes <= mem.allocated_bytes < mem.limit_bytes
    assert set(dataclasses.asdict(mem)) == {"bytes_per_position", "allocated_bytes", "held_bytes", "valid_bytes",
                                            "limit_bytes"}
    # The trace carries the same three numbers, tensor-free, through a JSON round trip.
    snap = CycleTrace.from_dict(traces[-1].to_dict()).snapshot("rollback").target
    assert (snap.allocated_bytes, snap.held_bytes, snap.valid_bytes) == (
        mem.allocated_bytes, mem.held_bytes, mem.valid_bytes
    )
    assert snap.max_capacity == sized_for(256, layout, page) and snap.bytes_per_slot == per_position


def test_a_cache_with_no_expected_reach_starts_small_and_grows():
    """A caller that never says how far it goes (here HF generate) gets a default-sized cache
    that grows as far as the run needs."""
    model = tiny_model("llama", max_positions=1024)
    cache = create_cache(model, "paged", page_size=8, max_len=1024)
    assert cache.allocated_slots == 256
    prompt = torch.tensor([[3, 4, 5, 6]])
    kwargs = dict(max_new_tokens=300, do_sample=False, pad_token_id=0)
    ours = model.generate(prompt, past_key_values=cache, **kwargs)
    assert ours.tolist() == model.generate(prompt, **kwargs).tolist()
    assert cache.get_seq_length() == 303 and cache.allocated_slots == 512
    assert sorted(cache.block_table + list(cache.pool.free_block_ids)) == list(range(64))
