"""Property tests of the paged cache's bookkeeping and of storage growth (hypothesis).

Random sequences of append(n) / truncate(m) / abandoned reservations, on pools small enough
that exhaustion happens often, must never leak or double-free a block, must keep the block
table at exactly ceil(len / page_size) blocks under "free" and never shrink it under "keep",
must leave everything unchanged when an append is refused (and refuse exactly at the true
limit: the context, or an explicit `num_blocks` cap), and the event log must replay to the
final state. The bookkeeping needs no tensors: a "forward" is simulated by the layer callbacks
`begin_write` / `end_write`. One property runs through a real tiny model as well, and one checks
the contiguous layout's write-pointer events.

Growth (storage sized for what a run can reach, grown on demand): random speculative runs with
a K that changes between cycles never use more storage than allocated without a "grow" event,
grow only when the free blocks (rows) cannot cover a reservation, by exactly the documented
amount, never past the cap; and with real tensors written through the layers, the K/V of every
surviving position stay bit-identical across growth.
"""

from __future__ import annotations

import collections
import math

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
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
    """Rebuild (length, block table, free list) from the event log alone, starting from a pool
    of `num_blocks` free blocks; "grow" events add blocks num_blocks.. to the tail of the free list."""
    length, table, free = 0, [], collections.deque(range(num_blocks))
    pool_size = num_blocks
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
        elif e.kind == "grow":
            assert (e.start, e.end) == (pool_size, pool_size + len(e.blocks)) and e.end > e.start
            assert list(e.blocks) == list(range(e.start, e.end))  # fresh ids, after every old one
            free.extend(e.blocks)
            pool_size = e.end
        else:
            raise AssertionError(f"unexpected event {e}")
    return length, table, list(free)


@settings(max_examples=300, deadline=None)
@given(
    ops=ops,
    page_size=st.integers(1, 5),
    num_blocks=st.one_of(st.none(), st.integers(1, 10)),
    max_len=st.integers(1, 60),
    initial_len=st.one_of(st.none(), st.integers(1, 30)),
    policy=st.sampled_from(["free", "keep"]),
)
def test_paging_bookkeeping(ops, page_size, num_blocks, max_len, initial_len, policy):
    cache = PagedKVCache(
        num_layers=2, max_len=max_len, page_size=page_size, policy=policy, num_blocks=num_blocks,
        initial_len=initial_len,
    )
    cap = math.ceil(max_len / page_size) if num_blocks is None else num_blocks
    assert cache.max_len == min(max_len, cap * page_size)
    assert cache.pool.num_blocks == min(cap, math.ceil(min(max_len, initial_len or 256) / page_size))
    initial_blocks = cache.pool.num_blocks
    token = 100
    previous_table: list[int] = []
    for kind, n in ops:
        before = bookkeeping(cache)
        if kind == "truncate":
            cache.truncate(max(0, cache.get_seq_length() - n), "rollback")
        else:
            ids = list(range(token, token + n))
            token += n
            end = cache.get_seq_length() + n
            pool_before = cache.pool.num_blocks
            try:
                cache.reserve(ids, "verify")
            except PoolExhaustedError as err:
                assert math.ceil(end / page_size) > cap  # only at the cap, never for want of growth
                assert "free" in str(err) and "need" in str(err)
                assert bookkeeping(cache) == before  # refused: nothing changed
                assert cache.pool.num_blocks == pool_before  # not even a partial growth
                continue
            except CacheCapacityError:
                assert end > max_len
                assert bookkeeping(cache) == before
                continue
            assert end <= cache.max_len and math.ceil(end / page_size) <= cap  # refused iff past the limit
            if kind == "append":
                fake_forward(cache, n)
                assert cache.token_ids[-n:] == ids
        check_invariants(cache, previous_table)
        assert cache.pool.num_blocks <= cap
        if not cache.pending:  # a cancelled reservation under "keep" returns its own blocks
            previous_table = cache.block_table

    length, table, free = replay(cache.drain_events(), initial_blocks)
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
@given(ops=ops, max_len=st.integers(1, 30), initial_len=st.one_of(st.none(), st.integers(1, 30)))
def test_contiguous_bookkeeping(ops, max_len, initial_len):
    """The write pointer's events chain up, a refused append changes nothing, and the buffer
    grows (recorded) only when an append needs rows past the allocated ones."""
    cache = ContiguousKVCache(num_layers=2, max_len=max_len, initial_len=initial_len)
    rows = cache.rows
    assert rows == min(max_len, initial_len or 256)
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
        end = cache.write_pointer
        assert cache.rows == (rows if end <= rows else min(max_len, max(end, 2 * rows)))
        rows = cache.rows
    pointer, length, grown_to = 0, 0, min(max_len, initial_len or 256)
    for e in cache.drain_events():
        if e.kind == "pointer":
            assert e.start == pointer and e.end <= grown_to  # never writes past the allocated rows
            pointer = e.end
        elif e.kind == "grow":
            assert e.start == grown_to < e.end <= max_len and e.blocks == ()
            grown_to = e.end
        else:
            assert e.kind in ("append", "truncate")
            length = e.end
    assert pointer == length == cache.write_pointer == cache.get_seq_length() + len(cache.pending)
    assert grown_to == cache.rows == cache.snapshot(0).capacity


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 5)), min_size=1, max_size=6),
    page_size=st.integers(1, 4),
    policy=st.sampled_from(["free", "keep"]),
)
def test_paging_through_a_real_model(tiny_llama, steps, page_size, policy):
    """Random append/truncate through a tiny Llama: logits and K/V equal DynamicCache's."""
    model = tiny_llama
    # Storage for 2 positions only: most steps grow the pool, under a real model's forward.
    cache = create_cache(model, "paged", page_size=page_size, policy=policy, max_len=64, initial_len=2)
    initial_blocks = cache.pool.num_blocks
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
    events = cache.drain_events()
    assert any(e.kind == "grow" for e in events) == (cache.pool.num_blocks > initial_blocks)
    length, table, free = replay(events, initial_blocks)
    assert (length, table, free) == (
        cache.get_seq_length(),
        cache.block_table,
        list(cache.pool.free_block_ids),
    )


# --------------------------------------------------------------------------- growth

cycle = st.tuples(st.integers(1, 9), st.integers(0, 9))  # (K this cycle, drafts accepted)


@settings(max_examples=200, deadline=None)
@given(
    prompt_len=st.integers(1, 12),
    k0=st.integers(1, 6),
    max_new=st.integers(1, 20),
    cycles=st.lists(cycle, min_size=1, max_size=25),
    page_size=st.integers(1, 5),
    layout=st.sampled_from(["paged-free", "paged-keep", "contiguous"]),
    cap=st.one_of(st.none(), st.integers(1, 30)),
)
def test_speculative_runs_grow_on_demand(prompt_len, k0, max_new, cycles, page_size, layout, cap):
    """A run sized for prompt + max_new + K0 + 1 whose K changes live (up to 9) and whose
    max_new_tokens is exceeded: every reserve that fits the allocated storage leaves it as it
    was; one that does not grows it once, by max(shortfall, doubling), capped; K/V storage is
    never written past what is allocated; refusals happen only at the true limit."""
    max_len = 60
    reach = prompt_len + max_new + k0 + 1
    if layout == "contiguous":
        cache: SpecvizCache = ContiguousKVCache(num_layers=2, max_len=max_len, initial_len=reach)
        assert cache.rows == min(reach, max_len)
    else:
        cache = PagedKVCache(num_layers=2, max_len=max_len, page_size=page_size, policy=layout[6:],
                             num_blocks=cap, initial_len=reach)
        limit_blocks = math.ceil(max_len / page_size) if cap is None else cap
        assert cache.pool.num_blocks == min(limit_blocks, math.ceil(min(reach, max_len) / page_size))
    if layout != "contiguous" and math.ceil(prompt_len / page_size) > limit_blocks:
        with pytest.raises(PoolExhaustedError):  # an explicit cap too small for the prompt
            cache.reserve(list(range(prompt_len)), "prefill")
        assert cache.block_table == [] and cache.events == []
        return
    cache.reserve(list(range(prompt_len)), "prefill")
    fake_forward(cache, prompt_len)
    previous_table: list[int] = []
    for k, accepted in cycles:
        n = cache.get_seq_length()  # committed minus the newest token, as between cycles
        events_before = len(cache.events)
        end = n + k + 1  # the verify pass: [x_n, d_1..d_K]
        if isinstance(cache, PagedKVCache):
            pool = cache.pool
            needed = cache.table.num_new_blocks(end)
            free, old_size = pool.num_free_blocks, pool.num_blocks
            try:
                cache.reserve([1] * (k + 1), "verify")
            except PoolExhaustedError:
                event("refused at the explicit cap")
                assert math.ceil(end / page_size) > limit_blocks
                assert pool.num_blocks == old_size and len(cache.events) == events_before
                continue
            except CacheCapacityError:
                assert end > max_len and len(cache.events) == events_before
                continue
            grows = [e for e in cache.events[events_before:] if e.kind == "grow"]
            if needed <= free:  # it fitted: no growth
                assert grows == [] and pool.num_blocks == old_size
            else:
                event("paged run grew")
                expected = min(limit_blocks, max(old_size + needed - free, 2 * old_size))
                assert [(e.start, e.end) for e in grows] == [(old_size, expected)]
                assert pool.num_blocks == expected
            assert pool.num_blocks <= limit_blocks
            assert max(cache.block_table) < pool.num_blocks  # every block used exists
        else:
            rows = cache.rows
            try:
                cache.reserve([1] * (k + 1), "verify")
            except CacheCapacityError:
                assert end > max_len and len(cache.events) == events_before
                continue
            grows = [e for e in cache.events[events_before:] if e.kind == "grow"]
            if end <= rows:
                assert grows == [] and cache.rows == rows
            else:
                event("contiguous run grew")
                assert [(e.start, e.end) for e in grows] == [(rows, min(max_len, max(end, 2 * rows)))]
            assert cache.write_pointer <= cache.rows <= max_len
        fake_forward(cache, k + 1)
        cache.truncate(n + 1 + min(accepted, k), "rollback")  # keep x_n and the accepted drafts
        if isinstance(cache, PagedKVCache):
            check_invariants(cache, previous_table)
            previous_table = cache.block_table
    if isinstance(cache, PagedKVCache):  # the log replays to the final state, growth included
        initial = min(limit_blocks, math.ceil(min(reach, max_len) / page_size))
        assert replay(cache.drain_events(), initial) == (
            cache.get_seq_length(), cache.block_table, list(cache.pool.free_block_ids)
        )


def _write(cache: SpecvizCache, n: int, gen: torch.Generator, dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
    """A forward through the layers with random K/V [1, H=2, n, D=3]; returns what each layer got."""
    written = []
    for layer in cache.layers:
        keys = torch.randn(1, 2, n, 3, generator=gen).to(dtype)
        values = torch.randn(1, 2, n, 3, generator=gen).to(dtype)
        layer.update(keys, values)
        written.append((keys, values))
    return written


@settings(max_examples=120, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 9)), min_size=1, max_size=20),
    initial_len=st.integers(1, 8),
    page_size=st.integers(1, 4),
    layout=st.sampled_from(["paged-free", "paged-keep", "contiguous"]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 2**16),
)
def test_growth_keeps_kv_bit_identical(steps, initial_len, page_size, layout, dtype, seed):
    """Real tensors through the layers' update(): after every append (growing or not) and every
    truncate, dense_kv of each layer is bit-identical to the K/V written for the surviving
    positions, and a growth copies the old storage (stale slots included) unchanged."""
    gen = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        cache: SpecvizCache = ContiguousKVCache(num_layers=2, max_len=200, initial_len=initial_len)
    else:
        cache = PagedKVCache(num_layers=2, max_len=200, page_size=page_size, policy=layout[6:],
                             initial_len=initial_len)
    refs: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    grew, peak, initial_slots = False, 0, cache.allocated_slots
    for n_new, n_drop in steps:
        storage = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers] if refs else None
        slots_before = cache.allocated_slots
        cache.reserve([5] * n_new, "verify")
        written = _write(cache, n_new, gen, dtype)
        peak = max(peak, cache.get_seq_length())
        grew = grew or cache.allocated_slots > slots_before
        if refs is None:
            refs = [(k, v) for k, v in written]
        else:
            refs = [(torch.cat([rk, k], dim=2), torch.cat([rv, v], dim=2)) for (rk, rv), (k, v) in zip(refs, written)]
        if storage is not None and cache.allocated_slots > slots_before:  # it grew: old storage copied as is
            event(f"{layout} grew with tensors")
            for layer, (old_k, old_v) in zip(cache.layers, storage):
                dim = 2 if layout == "contiguous" else 0
                keep = old_k.shape[dim]
                # everything but the slots this append wrote is exactly the old storage
                written_slots = set(cache._slot_list(cache.get_seq_length() - n_new, cache.get_seq_length()))
                for slot in range(keep if dim == 2 else keep * page_size):
                    if slot in written_slots:
                        continue
                    if dim == 2:
                        assert torch.equal(layer.keys[:, :, slot], old_k[:, :, slot])
                        assert torch.equal(layer.values[:, :, slot], old_v[:, :, slot])
                    else:
                        block, off = divmod(slot, page_size)
                        assert torch.equal(layer.keys[block, off], old_k[block, off])
                        assert torch.equal(layer.values[block, off], old_v[block, off])
        length = max(0, cache.get_seq_length() - n_drop)
        cache.truncate(length, "rollback")
        refs = [(rk[:, :, :length], rv[:, :, :length]) for rk, rv in refs]
        for layer_idx, (rk, rv) in enumerate(refs):
            keys, values = cache.dense_kv(layer_idx)
            assert keys.dtype == dtype and torch.equal(keys, rk) and torch.equal(values, rv)
        assert cache.layers[0].keys.dtype == dtype
        assert cache.allocated_slots == (
            cache.layers[0].keys.shape[2] if layout == "contiguous" else cache.layers[0].keys.shape[0] * page_size
        )
    assert cache.allocated_slots >= peak  # every position ever written had storage
    assert grew == (cache.allocated_slots > initial_slots)  # storage only ever changes by growing
