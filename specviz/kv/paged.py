"""Paged KV cache: fixed-size blocks from a shared pool, found through a block table (PagedAttention, vLLM).

As an operating system pages memory: each layer's K/V live in a **pool** of `page_size`-slot blocks,
`[num_blocks, page_size, H_kv, D]`, and the sequence's **block table** maps logical block i to a
physical block, so position p lives in slot `block_table[p // page_size] * page_size + p % page_size`
and memory is taken one block at a time. The **BlockPool**'s free list is a queue, as in vLLM: taken
from the head (`get_new_blocks`), returned to the tail (`free_blocks`). The pool grows on demand up to
its cap, and reads are one gather over the slot ids (docs/design.md §3, "The caches").

Rollback (docs/design.md §1, §2) has two policies. ``"free"``: blocks holding *only* removed positions
go back to the pool at once; the last, partly filled block keeps its *stale* slots. ``"keep"`` (vLLM
v1): the blocks stay reserved in the table and only the length moves back; the next appends overwrite
the stale slots ("reuse"), which speculative decoding needs again in the very next cycle anyway.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from specviz.config import POLICIES
from specviz.errors import CacheCapacityError, ConfigError, PoolExhaustedError
from specviz.kv.base import DEFAULT_INITIAL_LEN, KV, SpecvizCache, SpecvizLayer, grown
from specviz.trace import CacheEvent, CacheSnapshot


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_ids(blocks: Iterable[KVBlock]) -> tuple[int, ...]:
    return tuple(b.block_id for b in blocks)


@dataclass
class KVBlock:
    """One physical block of `page_size` token slots (vLLM's KVCacheBlock, minus prefix hashing)."""

    block_id: int
    ref_cnt: int = 0  # how many block tables hold it (0 or 1 here: one sequence per cache)


class BlockPool:
    """The free list of physical blocks: taken from the head, returned to the tail. The pool starts with
    `num_blocks` blocks; `max_blocks` caps `grow()` (None: no cap)."""

    def __init__(self, num_blocks: int, max_blocks: int | None = None) -> None:
        if num_blocks < 1:
            raise ConfigError(f"num_blocks must be >= 1, got {num_blocks}")
        if max_blocks is not None and max_blocks < num_blocks:
            raise ConfigError(f"a pool of {num_blocks} blocks cannot have a cap of {max_blocks}")
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_block_queue: collections.deque[KVBlock] = collections.deque(self.blocks)
        self.max_blocks = max_blocks

    @property
    def num_growable_blocks(self) -> int:
        """How many blocks `grow()` may still add (a large number when uncapped)."""
        return (1 << 62) if self.max_blocks is None else self.max_blocks - self.num_blocks

    def grow(self, num_new: int) -> list[KVBlock]:
        """Add `num_new` fresh blocks (ids num_blocks..), appended to the tail of the free list."""
        if not 0 <= num_new <= self.num_growable_blocks:
            raise PoolExhaustedError(f"KV block pool cannot grow by {num_new} block(s): it has {self.num_blocks} of at "
                                     f"most {self.max_blocks}")
        new = [KVBlock(i) for i in range(self.num_blocks, self.num_blocks + num_new)]
        self.blocks.extend(new)
        self.free_block_queue.extend(new)
        return new

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    @property
    def free_block_ids(self) -> tuple[int, ...]:
        """The free list, in the order the blocks will be handed out."""
        return block_ids(self.free_block_queue)

    def get_new_blocks(self, num_blocks: int) -> list[KVBlock]:
        if num_blocks > self.num_free_blocks:
            raise PoolExhaustedError(f"KV block pool exhausted: {num_blocks} block(s) needed, {self.num_free_blocks} "
                                     f"free (pool of {self.num_blocks})")
        blocks = [self.free_block_queue.popleft() for _ in range(num_blocks)]
        for block in blocks:
            block.ref_cnt += 1
        return blocks

    def free_blocks(self, blocks: Iterable[KVBlock]) -> None:
        for block in blocks:
            if block.ref_cnt <= 0:
                raise RuntimeError(f"double free of KV block {block.block_id}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_block_queue.append(block)


class BlockTable:
    """One sequence's logical -> physical block map (no tensors, no lengths: pure bookkeeping)."""

    def __init__(self, pool: BlockPool, page_size: int) -> None:
        self.pool = pool
        self.page_size = page_size
        self.blocks: list[KVBlock] = []

    @property
    def ids(self) -> list[int]:
        return list(block_ids(self.blocks))

    def __len__(self) -> int:
        return len(self.blocks)

    def num_new_blocks(self, num_positions: int) -> int:
        """Blocks to allocate so that the table covers positions 0..num_positions-1."""
        return max(0, cdiv(num_positions, self.page_size) - len(self.blocks))

    def grow(self, num_positions: int) -> list[KVBlock]:
        new = self.pool.get_new_blocks(self.num_new_blocks(num_positions))
        self.blocks.extend(new)
        return new

    def shrink(self, num_positions: int) -> list[KVBlock]:
        """Return to the pool every block that holds only positions >= num_positions."""
        keep = cdiv(num_positions, self.page_size)
        removed, self.blocks = self.blocks[keep:], self.blocks[:keep]
        self.pool.free_blocks(removed)
        return removed

    def slot(self, pos: int) -> int:
        block, offset = divmod(pos, self.page_size)
        return self.blocks[block].block_id * self.page_size + offset

    def slot_ids(self, num_positions: int, device: torch.device) -> torch.Tensor:
        """Slots of positions 0..num_positions-1, computed without a per-token loop."""  # [N]
        table = torch.tensor(self.ids, dtype=torch.long, device=device)  # [num_logical_blocks]
        offsets = torch.arange(self.page_size, dtype=torch.long, device=device)  # [page_size]
        return (table[:, None] * self.page_size + offsets).reshape(-1)[:num_positions]


class PagedLayer(SpecvizLayer):
    """One layer: pool tensors `keys`/`values` `[num_blocks, page_size, H_kv, D]`."""

    def grow(self, num_slots: int) -> None:
        num_blocks = cdiv(num_slots, self.keys.shape[1])
        if self.keys.shape[0] < num_blocks:  # block b keeps its id: rows 0..old-1 are copied
            self.keys = grown(self.keys, 0, num_blocks)
            self.values = grown(self.values, 0, num_blocks)

    def bytes_per_slot(self) -> int:
        return (self.keys[0, 0].nbytes + self.values[0, 0].nbytes) if self.is_initialized else 0

    def allocate(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pool_shape = (self.owner.pool.num_blocks, self.owner.page_size, key_states.shape[1])  # key_states [B, H, T, D]
        self.keys = key_states.new_zeros(*pool_shape, key_states.shape[-1])
        self.values = value_states.new_zeros(*pool_shape, value_states.shape[-1])

    @staticmethod
    def slots_of(pool: torch.Tensor) -> torch.Tensor:
        """The pool as one row per slot: [num_blocks * page_size, H, D] (a view)."""
        return pool.view(-1, pool.shape[2], pool.shape[3])

    def gather(self, slots: torch.Tensor) -> KV:
        keys = self.slots_of(self.keys).index_select(0, slots)  # [T, H, D]
        values = self.slots_of(self.values).index_select(0, slots)
        return keys.transpose(0, 1).unsqueeze(0), values.transpose(0, 1).unsqueeze(0)  # [1, H, T, D]

    def write_and_read(self, start: int, key_states: torch.Tensor, value_states: torch.Tensor) -> KV:
        slots = self.owner.slot_ids(start + key_states.shape[-2], self.keys.device)  # [L+T]
        self.slots_of(self.keys).index_copy_(0, slots[start:], key_states[0].transpose(0, 1))  # [T, H, D]
        self.slots_of(self.values).index_copy_(0, slots[start:], value_states[0].transpose(0, 1))
        return self.gather(slots)

    def dense(self, length: int) -> KV:
        return self.gather(self.owner.slot_ids(length, self.keys.device))

    def copy_slots(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        for pool in (self.keys, self.values):
            flat = self.slots_of(pool)
            flat.index_copy_(0, dst, flat.index_select(0, src))  # gathered first: overlaps are safe


class PagedKVCache(SpecvizCache):
    """A block table over a growable BlockPool (events: "append", "grow", "alloc", "reuse",
    "truncate", "free"); `num_blocks` caps the pool (None: the blocks `max_len` needs)."""

    layout = "paged"
    layer_class = PagedLayer

    def __init__(self, num_layers: int, max_len: int = 2048, page_size: int = 16, policy: str = "free",
                 num_blocks: int | None = None, initial_len: int | None = None) -> None:
        if page_size < 1:
            raise ConfigError(f"page_size must be >= 1, got {page_size}")
        if policy not in POLICIES:
            raise ConfigError(f"paged rollback policy must be one of {POLICIES}, got {policy!r}")
        if max_len < 1:
            raise ConfigError(f"max_len must be >= 1, got {max_len}")
        self.page_size, self.policy = page_size, policy
        cap = cdiv(max_len, page_size) if num_blocks is None else num_blocks
        initial = min(max_len, DEFAULT_INITIAL_LEN if initial_len is None else max(1, initial_len))
        self.max_blocks = cap  # the pool never grows past this many blocks
        self.pool = BlockPool(min(cap, cdiv(initial, page_size)), max_blocks=cap)
        self.table = BlockTable(self.pool, page_size)
        self._slot_cache: dict[tuple[torch.device, int], torch.Tensor] = {}
        self._blocks_before_pending = 0  # table length before the pending reservation
        super().__init__(num_layers, min(max_len, cap * page_size), capacity=self.pool.num_blocks * page_size)

    @property
    def held_slots(self) -> int:
        return len(self.table) * self.page_size

    @property
    def limit_slots(self) -> int:
        return self.max_blocks * self.page_size

    @property
    def block_table(self) -> list[int]:
        """Logical block i -> physical block id."""
        return self.table.ids

    def slot_ids(self, num_positions: int, device: torch.device) -> torch.Tensor:
        """Slot ids of positions 0..num_positions-1 on `device`, computed once per table state."""
        key = (device, num_positions)
        if key not in self._slot_cache:
            self._slot_cache[key] = self.table.slot_ids(num_positions, device)
        return self._slot_cache[key]

    def _check_room(self, start: int, end: int) -> None:
        needed = self.table.num_new_blocks(end)
        pool = self.pool
        if needed > pool.num_free_blocks + pool.num_growable_blocks:
            growth = (f" and the pool may grow by only {pool.num_growable_blocks} more to its cap of {self.max_blocks}"
                      if pool.num_growable_blocks else "")
            raise PoolExhaustedError(f"KV block pool exhausted: positions {start}..{end - 1} need {needed} new "
                                     f"block(s) of {self.page_size} slots but only {pool.num_free_blocks} of "
                                     f"{pool.num_blocks} are free{growth} (raise num_blocks)")
        if end > self.max_len:
            raise CacheCapacityError(f"paged KV cache full: positions {start}..{end - 1} exceed max_len={self.max_len}")

    def _make_room(self, start: int, end: int, phase: str) -> None:
        self._slot_cache.clear()
        if not self.pending:
            self._blocks_before_pending = len(self.table)
        # Blocks already in the table that hold no valid position yet get written again.
        first_empty = cdiv(start, self.page_size)
        reused = self.table.ids[first_empty : cdiv(end, self.page_size)]
        if self.policy == "free":  # a replaced, never-written reservation may have over-allocated
            self._free(end, phase)
        if reused:
            self.events.append(CacheEvent("reuse", phase, blocks=tuple(reused)))
        self._grow_pool(self.table.num_new_blocks(end) - self.pool.num_free_blocks, phase)
        if new := self.table.grow(end):
            self.events.append(CacheEvent("alloc", phase, blocks=block_ids(new)))

    def _grow_pool(self, shortfall: int, phase: str) -> None:
        """Add at least `shortfall` blocks (twice the pool, if the cap allows) to the free list."""
        if shortfall <= 0:
            return
        pool = self.pool
        target = min(self.max_blocks, max(pool.num_blocks + shortfall, 2 * pool.num_blocks))
        old = pool.num_blocks
        self._grow_storage(target * self.page_size)  # tensors first: an allocation failure changes nothing
        new = pool.grow(target - old)
        self.events.append(CacheEvent("grow", phase, old, pool.num_blocks, blocks=block_ids(new)))

    def _release(self, old_end: int, new_len: int, phase: str) -> None:
        self._slot_cache.clear()
        if self.policy == "free":
            self._free(new_len, phase)
        elif self.pending:  # "keep" holds blocks of computed tokens, not of a forward that never ran
            self._free(self._blocks_before_pending * self.page_size, phase)

    def reset(self) -> None:
        """Empty the cache and return every block to the pool (under either policy)."""
        super().reset()
        self._slot_cache.clear()
        self._free(0, "reset")

    def _free(self, num_positions: int, phase: str) -> None:
        if freed := self.table.shrink(num_positions):
            self.events.append(CacheEvent("free", phase, blocks=block_ids(freed)))

    def _slot_list(self, start: int, end: int) -> list[int]:
        return [self.table.slot(p) for p in range(start, end)]

    def _move_blocks(self, from_slot: int, to_slot: int) -> tuple[int, ...]:
        return (from_slot // self.page_size, to_slot // self.page_size)

    def snapshot(self, num_committed: int) -> CacheSnapshot:
        listed = cdiv(self.num_touched, self.page_size) * self.page_size  # whole blocks
        return self._snapshot(num_committed, listed, capacity=self.pool.num_blocks * self.page_size,
                              page_size=self.page_size, num_blocks=self.pool.num_blocks,
                              block_table=tuple(self.table.ids), free_blocks=self.pool.free_block_ids,
                              policy=self.policy)
