"""A process-wide cap on how many sessions decode at once, with a first-come queue (docs/design.md §3).

Every model run (a cycle, a prefill, the baseline, the lab) holds a slot of `DecodingGate`; the
others queue in arrival order and are told where they stand through `on_wait` ("2 ahead of you"),
or get `ServerBusyError` after `timeout`, with nothing changed. Slots are re-entrant per thread.

**Someone waiting goes first.** Background work (a cycle computed ahead) is served after every
urgent waiter; its `urgent` predicate, asked each time the queue is looked at, promotes it to its
place by arrival the moment someone needs it. `nudge()` tells the waiters to look again.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import SpecvizError


class ServerBusyError(SpecvizError):
    """No decoding slot freed up within the wait limit: try again in a moment."""


@dataclass(frozen=True)
class Place:
    """Where a waiting session stands."""

    ahead: int  # sessions queued before this one
    decoding: int  # sessions decoding now
    capacity: int  # at most this many decode at once
    waited_s: float

    def message(self) -> str:
        turn = "you are next" if self.ahead == 0 else f"{self.ahead} ahead of you"
        return (f"**The server is busy — {turn}.** {self.decoding} session(s) are decoding now (at most "
                f"{self.capacity} at a time on this server); your step starts as soon as a slot is free "
                f"(waiting {self.waited_s:.0f} s). The page is not frozen.")


class DecodingGate:
    def __init__(self, capacity: int) -> None:
        self._cond = threading.Condition()
        self.capacity = max(1, int(capacity))  # set by `shared_gate`, then `nudge()`d
        self._active = 0
        self._queue: deque[int] = deque()
        self._urgent: dict[int, Callable[[], bool]] = {}  # a background waiter's ticket -> its predicate
        self._tickets = itertools.count()  # arrival order
        self._held: dict[int, int] = {}  # thread id -> nesting depth of its slot

    def nudge(self) -> None:
        """Wake the waiters to look at the queue again (a background waiter's predicate or the capacity changed)."""
        with self._cond:
            self._cond.notify_all()

    def _rank(self, ticket: int) -> tuple[int, int]:
        """Queue order: the urgent first, each group by arrival (under the lock)."""
        urgent = self._urgent.get(ticket)
        return (0 if urgent is None or urgent() else 1, ticket)

    def _ahead(self, ticket: int) -> int:
        mine = self._rank(ticket)
        return sum(1 for t in self._queue if self._rank(t) < mine)

    def status(self) -> tuple[int, int]:
        """(decoding now, waiting now)."""
        with self._cond:
            return self._active, len(self._queue)

    @contextmanager
    def slot(self, on_wait: Callable[[Place], None] | None = None, timeout: float | None = None, poll: float = 0.5,
             urgent: Callable[[], bool] | None = None) -> Iterator[float]:
        """Hold one decoding slot for the `with` block; yields the seconds waited for it. While it
        waits, `on_wait(place)` is called outside the lock at each change in the queue and at least
        every `poll` seconds; after `timeout` seconds (None: never) it raises `ServerBusyError`.
        With `urgent`, the wait is background work (see the module docstring)."""
        me = threading.get_ident()
        with self._cond:
            nested = me in self._held
            if nested:
                self._held[me] += 1
        waited = 0.0 if nested else self._acquire(me, on_wait, timeout, poll, urgent)
        try:
            yield waited
        finally:
            with self._cond:
                self._held[me] -= 1
                if not self._held[me]:  # the outermost `with` of this thread: the slot is free
                    del self._held[me]
                    self._active -= 1
                    self._cond.notify_all()

    def _acquire(self, me: int, on_wait: Callable[[Place], None] | None, timeout: float | None, poll: float,
                 urgent: Callable[[], bool] | None) -> float:
        t0 = time.monotonic()
        with self._cond:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            if urgent is not None:
                self._urgent[ticket] = urgent
        try:
            while True:
                with self._cond:
                    ahead = self._ahead(ticket)
                    if ahead == 0 and self._active < self.capacity:
                        self._queue.remove(ticket)
                        self._active += 1
                        self._held[me] = 1
                        return time.monotonic() - t0
                    place = Place(ahead, self._active, self.capacity, time.monotonic() - t0)
                if timeout is not None and place.waited_s >= timeout:
                    raise ServerBusyError(f"The server is busy: {place.decoding} session(s) were decoding and "
                                          f"{place.ahead} waiting ahead of you for {place.waited_s:.0f} s. Nothing was "
                                          "lost — try again in a moment.")
                if on_wait is not None:
                    on_wait(place)
                with self._cond:
                    if not (self._ahead(ticket) == 0 and self._active < self.capacity):
                        left = poll if timeout is None else max(0.0, min(poll, timeout - (time.monotonic() - t0)))
                        self._cond.wait(left)
        finally:  # served, timed out or interrupted: out of the queue, and the next in line may fit now
            with self._cond:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                self._urgent.pop(ticket, None)
                self._cond.notify_all()


_shared: DecodingGate | None = None
_shared_lock = threading.Lock()


def shared_gate(capacity: int) -> DecodingGate:
    """The process's one gate (all sessions of a server share it); `capacity` applies from now."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = DecodingGate(capacity)
        elif _shared.capacity != capacity:
            _shared.capacity = max(1, int(capacity))
            _shared.nudge()
        return _shared
