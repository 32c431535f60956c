"""Releasing an idle session's KV caches, and rebuilding its decoder exactly when the user returns.

`park(dec)` keeps only what continues the run *exactly* (committed tokens, their origins and match
classes, prompt length, cycle count, finish reason, config, the generators' states) and drops the
decoder with its caches; the recorded traces stay in the session. `resume(pair, parked)` prefills
the committed tokens and restores the rest, so each cache holds what the invariant asks (docs/design.md §1) and the run
continues as if never parked (the tests compare with an uninterrupted run).

`IdleRegistry` tracks a process's sessions weakly and parks those idle past a timeout; a sweep never
waits for a busy session (one whose lock is held is not idle).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .config import DecodeConfig
from .engine import SpeculativeDecoder


@dataclass(frozen=True)
class ParkedDecoder:
    config: DecodeConfig
    committed: tuple[int, ...]
    origins: tuple[str, ...]
    num_prompt_tokens: int
    cycles: int
    finish_reason: str | None
    generator_states: dict[str, torch.Tensor]
    parked_at: float  # time.time()
    session_texts: Any = None  # the session's earlier texts (a SessionStore), handed back on resume
    match_classes: tuple[int | None, ...] = ()  # per committed token (engine._Session): what auto counts by


def park(dec: SpeculativeDecoder) -> ParkedDecoder:
    """Everything needed to continue `dec` exactly, without its caches."""
    s = dec._require()  # the engine's per-run state (engine._Session)
    return ParkedDecoder(
        config=dec.config, committed=tuple(s.committed), origins=tuple(s.origins),
        num_prompt_tokens=s.num_prompt_tokens, cycles=s.cycle, finish_reason=s.finish_reason, parked_at=time.time(),
        generator_states={role: g.get_state() for role, g in s.generators.items()},
        session_texts=dec.session_texts, match_classes=tuple(s.match_classes),
    )  # fmt: skip


def resume(pair: Any, parked: ParkedDecoder) -> SpeculativeDecoder:
    """A decoder in the parked state: a prefill of the committed tokens, the streams restored."""
    dec = SpeculativeDecoder(pair, parked.config, parked.session_texts)
    committed = list(parked.committed)
    dec.start(committed[: dec.max_context - 1])  # all of it unless the run filled the context
    s = dec._require()
    s.committed, s.origins, s.num_prompt_tokens = committed, list(parked.origins), parked.num_prompt_tokens
    s.match_classes = list(parked.match_classes) or [None] * len(committed)
    s.cycle, s.finish_reason = parked.cycles, parked.finish_reason
    for role, state in parked.generator_states.items():
        s.generators[role].set_state(state)
    return dec


class IdleRegistry:
    """Sessions by last activity. Items need `last_active` (time.monotonic()) and a `lock`."""

    def __init__(self) -> None:
        self._items: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def touch(self, item: Any, now: float | None = None) -> None:
        item.last_active = time.monotonic() if now is None else now
        with self._lock:
            self._items[id(item)] = item

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def sweep(self, idle_seconds: float, release: Callable[[Any], bool], now: float | None = None) -> int:
        """Call `release(item)` (under the item's lock) for each item idle for `idle_seconds` or
        more; returns how many it released. `idle_seconds <= 0` releases nothing."""
        if idle_seconds <= 0:
            return 0
        now = time.monotonic() if now is None else now
        with self._lock:
            items = list(self._items.values())
        released = 0
        for item in items:
            if now - getattr(item, "last_active", now) < idle_seconds or not item.lock.acquire(blocking=False):
                continue  # not idle, or busy right now (so not idle either)
            try:
                released += bool(release(item))
            finally:
                item.lock.release()
        return released


_registry = IdleRegistry()


def shared_registry() -> IdleRegistry:
    return _registry
