"""Contiguous KV cache: one buffer per layer plus a write pointer (gpt-fast, `transformers.StaticCache`).

Position p always lives in row p of a `[1, H_kv, rows, D]` buffer: appending n tokens writes rows
L..L+n-1 and moves the write pointer to L+n, and attention reads rows 0..L+n-1 as a plain slice.
Rollback only moves the pointer back; the rows past it are *stale*, never read (every read is the
slice 0..L-1) and overwritten by the next append. The buffer holds the rows the run is expected to
reach and grows by copying every row to a larger buffer (docs/design.md §1 "Roll back", §3 "The caches").
"""

from __future__ import annotations

import torch

from specviz.errors import CacheCapacityError
from specviz.kv.base import DEFAULT_INITIAL_LEN, KV, SpecvizCache, SpecvizLayer, grown
from specviz.trace import CacheEvent, CacheSnapshot


class ContiguousLayer(SpecvizLayer):
    """One layer: `keys`/`values` buffers `[1, H_kv, rows, D]`; row p holds position p."""

    def allocate(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        heads, rows = key_states.shape[1], self.owner.rows  # key_states [B, H, T, D]
        self.keys = key_states.new_zeros(1, heads, rows, key_states.shape[-1])
        self.values = value_states.new_zeros(1, heads, rows, value_states.shape[-1])

    def write_and_read(self, start: int, key_states: torch.Tensor, value_states: torch.Tensor) -> KV:
        end = start + key_states.shape[-2]
        self.keys[:, :, start:end] = key_states  # [1, H, T, D]
        self.values[:, :, start:end] = value_states
        return self.keys[:, :, :end], self.values[:, :, :end]  # [1, H, L+T, D], views

    def dense(self, length: int) -> KV:
        return self.keys[:, :, :length], self.values[:, :, :length]

    def grow(self, num_slots: int) -> None:
        if self.keys.shape[2] < num_slots:
            self.keys = grown(self.keys, 2, num_slots)  # [1, H, rows', D], rows 0..rows-1 copied
            self.values = grown(self.values, 2, num_slots)

    def copy_slots(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.keys[:, :, dst] = self.keys[:, :, src]  # the right side is a gathered copy: overlaps are safe
        self.values[:, :, dst] = self.values[:, :, src]

    def bytes_per_slot(self) -> int:
        return (self.keys[0, :, 0].nbytes + self.values[0, :, 0].nbytes) if self.is_initialized else 0


class ContiguousKVCache(SpecvizCache):
    """A growable buffer + a write pointer (events: "append", "grow", "pointer", "truncate")."""

    layout = "contiguous"
    layer_class = ContiguousLayer

    def __init__(self, num_layers: int, max_len: int = 2048, initial_len: int | None = None) -> None:
        initial = DEFAULT_INITIAL_LEN if initial_len is None else initial_len
        super().__init__(num_layers, max_len, capacity=max(1, min(max_len, initial)))

    @property
    def rows(self) -> int:
        """Rows allocated in each layer's buffer (grows on demand up to max_len)."""
        return self.allocated_slots

    @property
    def held_slots(self) -> int:
        return self.rows  # the whole buffer belongs to the sequence

    @property
    def limit_slots(self) -> int:
        return self.max_len

    @property
    def write_pointer(self) -> int:
        """Row the next token goes to (L, or L+n while a reservation is pending)."""
        return self.seq_len + len(self.pending)

    def _check_room(self, start: int, end: int) -> None:
        if end > self.max_len:
            raise CacheCapacityError(f"contiguous KV cache full: positions {start}..{end - 1} do not fit in its "
                                     f"{self.max_len} rows (create the cache with a larger max_len)")

    def _make_room(self, start: int, end: int, phase: str) -> None:
        if end > self.rows:  # _check_room guarantees end <= max_len
            old = self.rows
            self._grow_storage(min(self.max_len, max(end, 2 * old)))
            self.events.append(CacheEvent("grow", phase, old, self.rows))
        self.events.append(CacheEvent("pointer", phase, self.write_pointer, end))

    def _release(self, old_end: int, new_len: int, phase: str) -> None:
        if old_end != new_len:
            self.events.append(CacheEvent("pointer", phase, old_end, new_len))

    def _slot_list(self, start: int, end: int) -> list[int]:
        return list(range(start, end))

    def snapshot(self, num_committed: int) -> CacheSnapshot:
        return self._snapshot(num_committed, self.num_touched, capacity=self.rows, page_size=0, num_blocks=0)
