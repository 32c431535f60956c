"""What every specviz KV cache shares: one length for all layers, and the Hugging Face interface.

A KV cache keeps, per layer, the keys and values of the positions already processed (for one
sequence a `[1, H_kv, L, D]` pair), so a new token attends to them without recomputing them.
Speculative decoding needs four operations on its length L (docs/design.md §1, §1c; the caches
in §3, "The caches"):

* **reserve + append**: `reserve(token_ids, phase)` makes room for positions L..L+n-1 atomically
  before a forward; every layer's `update` then writes them, and L becomes L+n. They stay
  *provisional* until the acceptance test decides.
* **truncate**: the rollback; L moves back, the removed K/V stay in memory as *stale*, never read.
* **move**: a token tree's compaction copies accepted entries to their committed positions.
* **read**: `update` returns the dense K/V of 0..L+n-1, exactly what `DynamicCache` returns.

Storage is allocated for the expected reach and grows on demand up to the hard limit; every change
is a `CacheEvent`, and `snapshot()` is a tensor-free picture of the layout. This package is the only
one that imports `transformers.cache_utils` (§3).
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, get_layer_types_and_kwargs

from specviz.errors import ConfigError
from specviz.trace import CacheEvent, CacheSnapshot

AUTO_TOKEN = -1  # token id recorded for positions written without a reserve() (e.g. HF generate)
AUTO_PHASE = "auto"  # phase recorded for such implicit reservations
DEFAULT_INITIAL_LEN = 256  # positions allocated up front when a caller gives no expected reach
KV = tuple[torch.Tensor, torch.Tensor]  # one layer's (keys, values)


def grown(tensor: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """A zero tensor like `tensor` but `size` long along `dim`, with `tensor` copied to its start."""
    shape = list(tensor.shape)
    shape[dim] = size
    # A normal (not inference-mode) tensor, as in lazy_initialization: later writes must work
    # whether or not they run under torch.inference_mode().
    with torch.inference_mode(False):
        out = torch.zeros(shape, dtype=tensor.dtype, device=tensor.device)
        out.narrow(dim, 0, tensor.shape[dim]).copy_(tensor)
    return out


@dataclass(frozen=True)
class KVMemory:
    """Bytes of one cache's K/V (all layers, keys + values)."""

    bytes_per_position: int
    allocated_bytes: int  # the tensors that exist now (the buffer / the pool, as grown)
    held_bytes: int  # what the sequence owns, valid + stale: the whole buffer, or its block table's blocks
    valid_bytes: int  # positions 0..L-1, the only ones ever read
    limit_bytes: int  # allocating for the hard limit (max_len / the pool's cap) up front, for comparison


def num_attention_layers(model: torch.nn.Module) -> int:
    """Number of decoder layers of a causal LM; refuses anything but full attention. It must be exact (the
    length advances when *every* layer has written), so the model's own layer list (`layers`, GPT-2's `h`)
    wins over a config that a cut-down model (an early-exit draft) did not update."""
    config = model.config.get_text_config()
    try:
        layer_types, _ = get_layer_types_and_kwargs(config)
    except Exception:  # configs without per-layer info: assume full attention everywhere
        layer_types = ["full_attention"] * config.num_hidden_layers
    base = getattr(model, "base_model", model)
    blocks = getattr(base, "layers", None)
    blocks = blocks if isinstance(blocks, torch.nn.ModuleList) else getattr(base, "h", None)
    if isinstance(blocks, torch.nn.ModuleList):
        layer_types = layer_types[: len(blocks)]
        layer_types += ["full_attention"] * (len(blocks) - len(layer_types))
    if other := sorted(set(layer_types) - {"full_attention"}):
        raise ConfigError(f"specviz KV caches support full-attention layers only; this model also has {other} layers")
    return len(layer_types)


class SpecvizLayer(CacheLayerMixin):
    """One layer's K/V storage. The owning cache keeps one length for all layers; a layer asks it which
    positions to write (`begin_write`)."""

    is_sliding = False
    is_croppable = True
    is_compileable = False

    def __init__(self, owner: SpecvizCache, layer_idx: int) -> None:
        super().__init__()
        self.owner = owner
        self.layer_idx = layer_idx

    # -- storage, per layout: `write_and_read` writes positions start..start+t-1 and returns the dense K/V
    # [1, H_kv, L, D] of 0..start+t-1, `dense` those of 0..length-1; `grow` keeps every slot's K/V;
    # `bytes_per_slot` is 0 before the first write; `copy_slots` copies the K/V of physical slots src to dst
    # ([M] each), the sources gathered before anything is written, so overlapping copies are safe.
    @abstractmethod
    def allocate(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None: ...
    @abstractmethod
    def write_and_read(self, start: int, key_states: torch.Tensor, value_states: torch.Tensor) -> KV: ...
    @abstractmethod
    def dense(self, length: int) -> KV: ...
    @abstractmethod
    def grow(self, num_slots: int) -> None: ...
    @abstractmethod
    def bytes_per_slot(self) -> int: ...
    @abstractmethod
    def copy_slots(self, src: torch.Tensor, dst: torch.Tensor) -> None: ...

    # -- the transformers CacheLayerMixin interface --------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        # On the first update, in the layer's own dtype and device (layers may sit on different
        # devices), as normal tensors (see `grown`), whatever mode the first forward ran in.
        self.dtype, self.device = key_states.dtype, key_states.device
        with torch.inference_mode(False):
            self.allocate(key_states, value_states)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> KV:
        if key_states.shape[0] != 1:
            raise ConfigError(f"specviz KV caches hold one sequence (batch size 1); got batch size "
                              f"{key_states.shape[0]}")
        start = self.owner.begin_write(self.layer_idx, key_states.shape[-2])
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys, values = self.write_and_read(start, key_states, value_states)
        self.owner.end_write(self.layer_idx)
        return keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # Same as DynamicLayer: the keys returned by update() cover positions 0..L+q-1.
        return self.owner.get_seq_length() + query_length, 0

    def get_seq_length(self) -> int:
        return self.owner.get_seq_length()

    def get_max_length(self) -> int:
        return self.owner.max_len

    def batch_repeat_interleave(self, repeats: int) -> None:
        if repeats != 1:
            raise ConfigError("specviz KV caches hold one sequence (batch size 1)")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if indices.numel() != 1:
            raise ConfigError("specviz KV caches hold one sequence (batch size 1)")


class SpecvizCache(Cache, metaclass=ABCMeta):
    """A one-sequence KV cache with explicit reserve / truncate and an event log.

    A layout subclass says where position p lives (`_slot_list`: Python ints, for bookkeeping), how
    room is checked, made and given back (`_check_room`, `_make_room`, `_release`), how many slots it
    holds and allows (`held_slots`, `limit_slots`), its `snapshot` and its layer class.
    """

    layout: str = ""
    layer_class: type[SpecvizLayer] = SpecvizLayer

    def __init__(self, num_layers: int, max_len: int, capacity: int) -> None:
        if max_len < 1:
            raise ConfigError(f"max_len must be >= 1, got {max_len}")
        super().__init__(layers=[self.layer_class(self, i) for i in range(num_layers)])
        self.max_len = max_len
        self.seq_len = 0  # L: positions 0..L-1 hold valid K/V in every layer
        self.pending: list[int] = []  # token ids of the reservation being written (positions L..L+n-1)
        self.layers_done: set[int] = set()  # layers that have written it
        self.events: list[CacheEvent] = []
        self.tokens: list[int] = []  # token id of each valid (or pending) position
        # Per physical slot: the position and token last written there (-1: never), for snapshots.
        self.slot_positions = [-1] * capacity
        self.slot_tokens = [-1] * capacity
        self.num_touched = 0  # slots 0..num_touched-1 may have been written

    # -- memory ----------------------------------------------------------------------------
    @property
    def allocated_slots(self) -> int:
        """Slots whose storage exists now (they grow on demand, up to `limit_slots`)."""
        return len(self.slot_positions)

    @property
    @abstractmethod
    def held_slots(self) -> int: ...
    @property
    @abstractmethod
    def limit_slots(self) -> int: ...

    def bytes_per_position(self) -> int:
        """Bytes of keys + values of one position over all layers (0 before the first write)."""
        return sum(layer.bytes_per_slot() for layer in self.layers if layer.is_initialized)

    def memory_bytes(self) -> KVMemory:
        """Allocated vs held vs valid bytes of this cache (see `KVMemory`)."""
        per = self.bytes_per_position()
        allocated = sum(layer.keys.nbytes + layer.values.nbytes for layer in self.layers if layer.is_initialized)
        return KVMemory(bytes_per_position=per, allocated_bytes=allocated, held_bytes=self.held_slots * per,
                        valid_bytes=self.seq_len * per, limit_bytes=self.limit_slots * per)

    def _grow_storage(self, num_slots: int) -> None:
        """Enlarge every layer's storage and the slot bookkeeping to `num_slots` slots. Tensors first:
        if an allocation fails, the bookkeeping is unchanged (a layer that did grow is merely larger)."""
        for layer in self.layers:
            if layer.is_initialized:
                layer.grow(num_slots)
        extra = num_slots - len(self.slot_positions)
        self.slot_positions.extend([-1] * extra)
        self.slot_tokens.extend([-1] * extra)

    # -- public bookkeeping API (Cache's mask sizes, query offset and max length ask the layers) ----
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seq_len

    @property
    def token_ids(self) -> list[int]:
        """Token ids of the valid positions 0..L-1 (-1 where written without reserve)."""
        return self.tokens[: self.seq_len]

    def reserve(self, token_ids: Sequence[int], phase: str) -> None:
        """Make room for positions L..L+n-1 before a forward over `token_ids`.

        Atomic: checked against the hard limit first (unallocated storage is grown, not refused);
        CacheCapacityError / PoolExhaustedError change nothing. A reservation never written is replaced.
        """
        token_ids = [int(t) for t in token_ids]
        n = len(token_ids)
        if n < 1:
            raise ValueError("reserve() needs at least one token")
        start, end = self.seq_len, self.seq_len + n
        self._check_room(start, end)  # raises before any change
        if self.pending:  # an earlier reservation's forward never finished: drop it first
            self.events.append(CacheEvent("truncate", phase, start + len(self.pending), start))
            self.layers_done.clear()
        self.events.append(CacheEvent("append", phase, start, end))
        self._make_room(start, end, phase)  # layout-specific: blocks / pointer events
        self.pending = token_ids
        del self.tokens[start:]
        self.tokens.extend(token_ids)
        for pos, (slot, token) in enumerate(zip(self._slot_list(start, end), token_ids, strict=True), start):
            self.slot_positions[slot] = pos
            self.slot_tokens[slot] = token
            self.num_touched = max(self.num_touched, slot + 1)

    def truncate(self, new_len: int, phase: str) -> None:
        """Roll back to `new_len <= L` valid positions. Also cancels a pending reservation, even one
        whose forward stopped part-way (after some layers wrote): those slots simply become stale."""
        if not 0 <= new_len <= self.seq_len:
            raise ValueError(f"truncate({new_len}) needs 0 <= new_len <= seq_len={self.seq_len}")
        old_end = self.seq_len + len(self.pending)  # a pending reservation is dropped too
        if new_len < old_end:
            self.events.append(CacheEvent("truncate", phase, old_end, new_len))
        self._release(old_end, new_len, phase)  # layout-specific
        self.seq_len = new_len
        self.pending = []
        self.layers_done.clear()
        del self.tokens[new_len:]

    def move(self, moves: Sequence[tuple[int, int]], phase: str) -> None:
        """Copy the K/V of entry `src` to entry `dst` for every (src, dst) of `moves`, in every layer. Each
        dst < src < L and the dsts increase (the compaction order); a bad move raises ValueError, nothing changed."""
        moves = [(int(a), int(b)) for a, b in moves]
        if not moves:
            return
        if self.pending:
            raise ValueError("move() while a reservation is pending: finish or cancel the forward first")
        for k, (src, dst) in enumerate(moves):
            if not 0 <= dst < src < self.seq_len:
                raise ValueError(f"move {src} -> {dst} needs 0 <= to < from < seq_len={self.seq_len}")
            if k and dst <= moves[k - 1][1]:
                raise ValueError("move() targets must increase (the compaction order)")
        src_slots = self.slots([a for a, _ in moves])
        dst_slots = self.slots([b for _, b in moves])
        for layer in self.layers:
            if layer.is_initialized:
                device = layer.keys.device
                layer.copy_slots(torch.tensor(src_slots, device=device), torch.tensor(dst_slots, device=device))
        for (src, dst), from_slot, to_slot in zip(moves, src_slots, dst_slots):
            self.tokens[dst] = self.tokens[src]
            self.slot_positions[to_slot] = dst
            self.slot_tokens[to_slot] = self.tokens[src]
            self.events.append(CacheEvent("move", phase, src, dst, blocks=self._move_blocks(from_slot, to_slot)))

    def slots(self, entries: Sequence[int]) -> list[int]:
        """The physical slots of cache entries (each < L + pending)."""
        return [self._slot_list(e, e + 1)[0] for e in entries]

    def _move_blocks(self, from_slot: int, to_slot: int) -> tuple[int, ...]:
        """The physical (from, to) blocks of a move, recorded with its event (paged layout only)."""
        return ()

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' rollback API (as DynamicCache.crop): a negative count of tokens to drop."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop() takes a negative number of tokens to remove, got {tokens_to_remove}")
        self.truncate(max(0, self.seq_len + tokens_to_remove), AUTO_PHASE)

    def reset(self) -> None:
        """Empty the cache (transformers' Cache.reset, without asking the layers: stale K/V are never read)."""
        self.truncate(0, "reset")

    def drain_events(self) -> list[CacheEvent]:
        events, self.events = self.events, []
        return events

    def dense_kv(self, layer_idx: int) -> KV:
        """Keys and values `[1, H_kv, L, D]` of the valid positions of one layer (contiguous: views,
        valid until the next write; paged: a gathered copy)."""
        layer = self.layers[layer_idx]
        if not layer.is_initialized:
            raise ValueError(f"layer {layer_idx} has not been written yet")
        return layer.dense(self.seq_len)

    @abstractmethod
    def snapshot(self, num_committed: int) -> CacheSnapshot: ...

    def _snapshot(self, num_committed: int, listed: int, **layout: Any) -> CacheSnapshot:
        """The fields every layout's snapshot shares; slots 0..listed-1 are listed, `layout` adds the rest."""
        return CacheSnapshot(
            layout=self.layout, seq_len=self.seq_len, num_committed=min(num_committed, self.seq_len),
            slot_positions=tuple(self.slot_positions[:listed]), slot_tokens=tuple(self.slot_tokens[:listed]),
            max_capacity=self.limit_slots, bytes_per_slot=self.bytes_per_position(), **layout,
        )

    # -- called by the layers during a forward -------------------------------------------
    def begin_write(self, layer_idx: int, num_new: int) -> int:
        """A layer is about to write `num_new` positions; returns the first position L."""
        if layer_idx in self.layers_done:
            # The previous forward stopped part-way (an exception); this is a retry: start over.
            self.layers_done.clear()
        if not self.pending:
            self.reserve([AUTO_TOKEN] * num_new, AUTO_PHASE)  # forward without reserve()
        elif len(self.pending) != num_new:
            raise ValueError(f"reserve() was called for {len(self.pending)} token(s) but the forward feeds {num_new}")
        return self.seq_len

    def end_write(self, layer_idx: int) -> None:
        self.layers_done.add(layer_idx)
        if len(self.layers_done) == len(self.layers):  # every layer wrote: the append is done
            self.seq_len += len(self.pending)
            self.pending = []
            self.layers_done.clear()

    # -- layout hooks ----------------------------------------------------------------------
    @abstractmethod
    def _check_room(self, start: int, end: int) -> None: ...
    @abstractmethod
    def _make_room(self, start: int, end: int, phase: str) -> None: ...
    @abstractmethod
    def _release(self, old_end: int, new_len: int, phase: str) -> None: ...
    @abstractmethod
    def _slot_list(self, start: int, end: int) -> list[int]: ...

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(layers={len(self.layers)}, seq_len={self.seq_len}, "
                f"allocated={self.allocated_slots}, max_len={self.max_len})")
