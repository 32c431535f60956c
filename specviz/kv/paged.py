"""Paged KV cache: fixed-size blocks from a shared pool, found through a block table (vLLM).

PagedAttention (Kwon et al. 2023, "Efficient Memory Management for Large Language Model
Serving with PagedAttention"; vLLM) stores K/V the way an operating system stores memory pages:

* The physical memory of each layer is a **pool** of `num_blocks` fixed-size blocks of
  `page_size` token slots: a tensor `[num_blocks, page_size, H_kv, D]`. Block ids are shared by
  all layers, so one table serves the whole model.
* The pool starts with the blocks the run is expected to reach (`initial_len` rounded up to
  whole pages) and **grows** when a reservation needs more blocks than are free: the pool
  tensors are reallocated (twice the blocks, or what is needed) with every old block copied
  under the same id, and the new block ids `num_blocks ..` join the tail of the free list
  (a "grow" event). It never grows past its cap: the blocks `max_len` needs, or an explicit
  `num_blocks`, which stays a hard cap (a small pool is how the "pool exhausted" lesson is
  staged). vLLM sizes its pool once, from the GPU memory left after loading the model; a
  one-sequence teaching cache grows instead, so it costs what the run uses.
* A sequence owns a **block table**: logical block i (positions `i*page_size ..
  (i+1)*page_size - 1`) lives in physical block `block_table[i]`. Position p therefore lives
  in slot `block_table[p // page_size] * page_size + p % page_size` — the blocks of one
  sequence need not be adjacent, and memory is taken one block at a time as the sequence grows
  instead of `max_len` up front.
* The **BlockPool** hands out free blocks (`get_new_blocks(n)`) and takes them back
  (`free_blocks(blocks)`); `num_free_blocks` says how many are left. As in vLLM the free list is
  a queue: blocks are taken from its head and returned to its tail.
* Attention needs the keys of positions 0..L-1 in order; reading them is one vectorised gather
  over their slot ids (`index_select`), not a loop over blocks. (vLLM's kernels read through
  the block table inside the attention kernel; specviz gathers because Hugging Face attention
  wants dense tensors, and the result is exactly a DynamicCache's.)

Rollback after a rejected draft (positions new_len..L-1 removed) has two policies:

* ``"free"`` — blocks that hold *only* removed positions go back to the pool at once, so the
  table always has exactly `ceil(L / page_size)` blocks. The last, partially filled block stays:
  its slots past new_len are **stale** (old K/V, never read: reads cover 0..L-1 only; the next
  append overwrites them).
* ``"keep"`` — vLLM v1 style: the blocks stay in the block table, reserved; only the length
  moves back, and the next appends overwrite the stale slots (recorded as "reuse"). Nothing is
  returned to the pool, so the table never shrinks; speculative decoding will need those slots
  again in the very next cycle anyway. (Two exceptions: blocks taken for a forward that never
  completed go back when that reservation is cancelled, and `reset()` returns everything.)
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from specviz.config import POLICIES
from specviz.errors import CacheCapacityError, ConfigError, PoolExhaustedError
from specviz.kv.base import DEFAULT_INITIAL_LEN, SpecvizCache, SpecvizLayer, grown
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
    """The free list of physical blocks: taken from the head, returned to the tail.

    `max_blocks` caps `grow()` (None: no cap); the pool starts with `num_blocks` blocks.
    """

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
            raise PoolExhaustedError(
                f"KV block pool cannot grow by {num_new} block(s): it has {self.num_blocks} of at most "
                f"{self.max_blocks}"
            )
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
            raise PoolExhaustedError(
                f"KV block pool exhausted: {num_blocks} block(s) needed, {self.num_free_blocks} free "
                f"(pool of {self.num_blocks})"
            )
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
        return [b.block_id for b in self.blocks]

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

    def gather(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys = self.slots_of(self.keys).index_select(0, slots)  # [T, H, D]
        values = self.slots_of(self.values).index_select(0, slots)
        return keys.transpose(0, 1).unsqueeze(0), values.transpose(0, 1).unsqueeze(0)  # [1, H, T, D]

    def write_and_read(
        self, start: int, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        slots = self.owner.slot_ids(start + key_states.shape[-2], self.keys.device)  # [L+T]
        self.slots_of(self.keys).index_copy_(0, slots[start:], key_states[0].transpose(0, 1))  # [T, H, D]
        self.slots_of(self.values).index_copy_(0, slots[start:], value_states[0].transpose(0, 1))
        return self.gather(slots)

    def dense(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
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

    def __init__(
        self,
        num_layers: int,
        max_len: int = 2048,
        page_size: int = 16,
        policy: str = "free",
        num_blocks: int | None = None,
        initial_len: int | None = None,
    ) -> None:
        if page_size < 1:
            raise ConfigError(f"page_size must be >= 1, got {page_size}")
        if policy not in POLICIES:
            raise ConfigError(f"paged rollback policy must be one of {POLICIES}, got {policy!r}")
        if max_len < 1:
            raise ConfigError(f"max_len must be >= 1, got {max_len}")
        if num_blocks is not None and num_blocks < 1:
            raise ConfigError(f"num_blocks must be >= 1, got {num_blocks}")
        self.page_size = page_size
        self.policy = policy
        cap = cdiv(max_len, page_size) if num_blocks is None else num_blocks
        initial = min(max_len, DEFAULT_INITIAL_LEN if initial_len is None else max(1, initial_len))
        self.pool = BlockPool(min(cap, cdiv(initial, page_size)), max_blocks=cap)
        self.table = BlockTable(self.pool, page_size)
        self._slot_cache: dict[tuple[torch.device, int], torch.Tensor] = {}
        self._blocks_before_pending = 0  # table length before the pending reservation
        super().__init__(num_layers, min(max_len, cap * page_size), capacity=self.pool.num_blocks * page_size)

    @property
    def max_blocks(self) -> int:
        """The pool's cap: it never grows past this many blocks."""
        assert self.pool.max_blocks is not None
        return self.pool.max_blocks

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
            growth = (
                f" and the pool may grow by only {pool.num_growable_blocks} more to its cap of {self.max_blocks}"
                if pool.num_growable_blocks
                else ""
            )
            raise PoolExhaustedError(
                f"KV block pool exhausted: positions {start}..{end - 1} need {needed} new block(s) of "
                f"{self.page_size} slots but only {pool.num_free_blocks} of {pool.num_blocks} "
                f"are free{growth} (raise num_blocks)"
            )
        if end > self.max_len:
            raise CacheCapacityError(
                f"paged KV cache full: positions {start}..{end - 1} exceed max_len={self.max_len}"
            )

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
        new = self.table.grow(end)
        if new:
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
        freed = self.table.shrink(num_positions)
        if freed:
            self.events.append(CacheEvent("free", phase, blocks=block_ids(freed)))

    def _slot_list(self, start: int, end: int) -> list[int]:
        return [self.table.slot(p) for p in range(start, end)]

    def _move_blocks(self, from_slot: int, to_slot: int) -> tuple[int, ...]:
        return (from_slot // self.page_size, to_slot // self.page_size)

    def snapshot(self, num_committed: int) -> CacheSnapshot:
        listed = cdiv(self.num_touched, self.page_size) * self.page_size  # whole blocks
        return self._snapshot(
            num_committed, listed, capacity=self.pool.num_blocks * self.page_size, page_size=self.page_size,
            num_blocks=self.pool.num_blocks, block_table=tuple(self.table.ids), free_blocks=self.pool.free_block_ids,
            policy=self.policy,
        )
