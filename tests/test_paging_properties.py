"""Property tests of the paged cache's bookkeeping (hypothesis).

Random sequences of append(n) / truncate(m) / abandoned reservations, on pools small enough
that exhaustion happens often, must never leak or double-free a block, must keep the block
table at exactly ceil(len / page_size) blocks under "free" and never shrink it under "keep",
must leave everything unchanged when an append is refused, and the event log must replay to
the final state. The bookkeeping needs no tensors: a "forward" is simulated by the layer
callbacks `begin_write` / `end_write`. One property runs through a real tiny model as well, and
one checks the contiguous layout's write-pointer events.
"""

from __future__ import annotations

import collections
import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import DynamicCache

from specviz.errors import CacheCapacityError, PoolExhaustedError
from specviz.kv import ContiguousKVCache, PagedKVCache, SpecvizCache, create_cache
from specviz.trace import CacheEvent

op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 7)),
    st.tuples(st.just("truncate"), st.integers(0, 9)),  # number of positions to remove
    st.tuples(st.just("abandon"), st.integers(1, 7)),  # reserve, then the forward never runs
)
ops = st.lists(op, min_size=1, max_size=40)


def fake_forward(cache: SpecvizCache, n: int) -> None:
    """What a model's forward does to the bookkeeping: every layer writes n positions."""
    for layer_idx in range(len(cache.layers)):
        cache.begin_write(layer_idx, n)
        cache.end_write(layer_idx)


def bookkeeping(cache: PagedKVCache):
    return (
        cache.get_seq_length(),
        list(cache.pending),
        cache.block_table,
        cache.pool.free_block_ids,
        [b.ref_cnt for b in cache.pool.blocks],
        list(cache.events),
        cache.token_ids,
    )


def check_invariants(cache: PagedKVCache, previous_table: list[int]) -> None:
    pool, table = cache.pool, cache.block_table
    free = list(pool.free_block_ids)
    # no leak, no double free: every block is either free or in the table, exactly once
    assert sorted(free + table) == list(range(pool.num_blocks))
    assert all(pool.blocks[i].ref_cnt == 1 for i in table)
    assert all(pool.blocks[i].ref_cnt == 0 for i in free)
    covered = math.ceil((cache.get_seq_length() + len(cache.pending)) / cache.page_size)
    if cache.policy == "free":
        assert len(table) == covered
        if not cache.pending:
            assert len(table) == math.ceil(cache.get_seq_length() / cache.page_size)
    else:  # "keep": the table only ever grows (over completed appends), entries never change
        assert len(table) >= covered
        assert table[: len(previous_table)] == previous_table
    assert cache.get_seq_length() <= cache.max_len


def replay(events: list[CacheEvent], num_blocks: int) -> tuple[int, list[int], list[int]]:
    """Rebuild (length, block table, free list) from the event log alone."""
    length, table, free = 0, [], collections.deque(range(num_blocks))
    for e in events:
        if e.kind == "append":
            length = e.end
        elif e.kind == "truncate":
            assert e.end < e.start
            length = e.end
        elif e.kind == "alloc":
            assert [free.popleft() for _ in e.blocks] == list(e.blocks)  # taken from the head
            table.extend(e.blocks)
        elif e.kind == "free":
            assert table[-len(e.blocks) :] == list(e.blocks)  # only the tail of the table
            del table[-len(e.blocks) :]
            free.extend(e.blocks)
        elif e.kind == "reuse":
            assert set(e.blocks) <= set(table)
        else:
            raise AssertionError(f"unexpected event {e}")
    return length, table, list(free)


@settings(max_examples=300, deadline=None)
@given(
    ops=ops,
    page_size=st.integers(1, 5),
    num_blocks=st.integers(1, 10),
    max_len=st.integers(1, 60),
    policy=st.sampled_from(["free", "keep"]),
)
def test_paging_bookkeeping(ops, page_size, num_blocks, max_len, policy):
    cache = PagedKVCache(
        num_layers=2, max_len=max_len, page_size=page_size, policy=policy, num_blocks=num_blocks
    )
    assert cache.max_len == min(max_len, num_blocks * page_size)
    token = 100
    previous_table: list[int] = []
    for kind, n in ops:
        before = bookkeeping(cache)
        if kind == "truncate":
            cache.truncate(max(0, cache.get_seq_length() - n), "rollback")
        else:
            ids = list(range(token, token + n))
            token += n
            try:
                cache.reserve(ids, "verify")
            except PoolExhaustedError as err:
                assert cache.get_seq_length() + n > num_blocks * page_size
                assert "free" in str(err) and "need" in str(err)
                assert bookkeeping(cache) == before  # refused: nothing changed
                continue
            except CacheCapacityError:
                assert cache.get_seq_length() + n > max_len
                assert bookkeeping(cache) == before
                continue
            if kind == "append":
                fake_forward(cache, n)
                assert cache.token_ids[-n:] == ids
        check_invariants(cache, previous_table)
        if not cache.pending:  # a cancelled reservation under "keep" returns its own blocks
            previous_table = cache.block_table

    length, table, free = replay(cache.drain_events(), num_blocks)
    assert length == cache.get_seq_length() + len(cache.pending)
    assert table == cache.block_table
    assert free == list(cache.pool.free_block_ids)
    # snapshots agree with the table: every valid position's slot is committed/provisional
    snap = cache.snapshot(num_committed=cache.get_seq_length())
    for pos in range(cache.get_seq_length()):
        slot = cache.table.slot(pos)
        assert snap.slot_positions[slot] == pos
        assert snap.slot_state(slot) == "committed"


@settings(max_examples=100, deadline=None)
@given(ops=ops, max_len=st.integers(1, 30))
def test_contiguous_bookkeeping(ops, max_len):
    """The write pointer's events chain up, and a refused append changes nothing."""
    cache = ContiguousKVCache(num_layers=2, max_len=max_len)
    for kind, n in ops:
        before = (cache.get_seq_length(), list(cache.pending), list(cache.events), cache.token_ids)
        if kind == "truncate":
            cache.truncate(max(0, cache.get_seq_length() - n), "rollback")
            continue
        try:
            cache.reserve([7] * n, "verify")
        except CacheCapacityError:
            assert cache.get_seq_length() + n > max_len
            assert (
                cache.get_seq_length(),
                list(cache.pending),
                list(cache.events),
                cache.token_ids,
            ) == before
            continue
        if kind == "append":
            fake_forward(cache, n)
        assert cache.write_pointer <= max_len
    pointer, length = 0, 0
    for e in cache.drain_events():
        if e.kind == "pointer":
            assert e.start == pointer
            pointer = e.end
        else:
            assert e.kind in ("append", "truncate")
            length = e.end
    assert pointer == length == cache.write_pointer == cache.get_seq_length() + len(cache.pending)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 5)), min_size=1, max_size=6),
    page_size=st.integers(1, 4),
    policy=st.sampled_from(["free", "keep"]),
)
def test_paging_through_a_real_model(tiny_llama, steps, page_size, policy):
    """Random append/truncate through a tiny Llama: logits and K/V equal DynamicCache's."""
    model = tiny_llama
    cache = create_cache(model, "paged", page_size=page_size, policy=policy, max_len=64)
    ref = DynamicCache(config=model.config)
    gen = torch.Generator().manual_seed(len(steps) * 31 + page_size)
    previous_table: list[int] = []
    with torch.no_grad():
        for n_new, n_drop in steps:
            ids = torch.randint(0, 64, (1, n_new), generator=gen)
            cache.reserve(ids[0].tolist(), "verify")
            ours = model(ids, past_key_values=cache, use_cache=True).logits
            theirs = model(ids, past_key_values=ref, use_cache=True).logits
            torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
            n_drop = min(n_drop, cache.get_seq_length())
            cache.truncate(cache.get_seq_length() - n_drop, "rollback")
            ref.crop(-n_drop)
            check_invariants(cache, previous_table)
            previous_table = cache.block_table
            for layer_idx, layer in enumerate(ref.layers):
                keys, values = cache.dense_kv(layer_idx)
                torch.testing.assert_close(keys, layer.keys, atol=1e-5, rtol=0)
                torch.testing.assert_close(values, layer.values, atol=1e-5, rtol=0)
    length, table, free = replay(cache.drain_events(), cache.pool.num_blocks)
    assert (length, table, free) == (
        cache.get_seq_length(),
        cache.block_table,
        list(cache.pool.free_block_ids),
    )
