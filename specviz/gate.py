"""A process-wide cap on how many sessions decode at once, with a first-come queue.

On a shared server every browser session steps its own decoder in its own script thread, all on
one model pair. Unbounded, sessions stepping at once on a few cores slow every step down and make
every page look frozen. `DecodingGate` lets `capacity` steps run at a time; the others queue
in arrival order and are told, while they wait, where they stand ("2 ahead of you"), through the
`on_wait` callback (the app draws it on the waiting page). A session that waits longer than
`timeout` gets `ServerBusyError` and nothing changes in its state.

What counts as "decoding" is anything that runs a model: a cycle, a prefill (a new run or a
rebuilt one), the autoregressive baseline and the exactness lab. Slots are re-entrant per
thread, so a step that prefills inside a held slot does not wait for itself.

**Someone waiting goes first.** A cycle computed ahead (the stage's prefetch) waits as
*background* work: every waiter someone is waiting for (a click, a page opening) is served before
it, whenever it came. Its `urgent` predicate, asked each time the queue is looked at, promotes it
the moment someone needs it after all (a click reached the cycle it is computing): then it takes
its place among the urgent waiters by arrival. `nudge()` tells the waiters to look again.
"""

from __future__ import annotations

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
        self._capacity = max(1, int(capacity))
        self._active = 0
        self._queue: deque[int] = deque()
        self._urgent: dict[int, Callable[[], bool]] = {}  # a background waiter's ticket -> its predicate
        self._tickets = 0
        self._held: dict[int, int] = {}  # thread id -> nesting depth of its slot

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity: int) -> None:
        with self._cond:
            self._capacity = max(1, int(capacity))
            self._cond.notify_all()

    def nudge(self) -> None:
        """Wake the waiters to look at the queue again (a background waiter's predicate changed)."""
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
        """Hold one decoding slot for the `with` block; yields the seconds waited for it.

        `on_wait(place)` is called (outside the gate's lock) each time the waiting session is
        woken by a change in the queue, and at least every `poll` seconds, so a waiting page can
        show its place and the time; never when a slot is free at once. After `timeout` seconds
        (None = wait forever) it raises `ServerBusyError`. With `urgent`, the wait is background
        work, served after every urgent waiter while `urgent()` is false (see the module
        docstring)."""
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
            ticket = self._tickets
            self._tickets += 1
            self._queue.append(ticket)
            if urgent is not None:
                self._urgent[ticket] = urgent
        try:
            while True:
                with self._cond:
                    ahead = self._ahead(ticket)
                    if ahead == 0 and self._active < self._capacity:
                        self._queue.remove(ticket)
                        self._urgent.pop(ticket, None)
                        self._active += 1
                        self._held[me] = 1
                        self._cond.notify_all()  # the next in line may fit too
                        return time.monotonic() - t0
                    place = Place(ahead, self._active, self._capacity, time.monotonic() - t0)
                if timeout is not None and place.waited_s >= timeout:
                    raise ServerBusyError(
                        f"The server is busy: {place.decoding} session(s) were decoding and {place.ahead} waiting "
                        f"ahead of you for {place.waited_s:.0f} s. Nothing was lost — try again in a moment."
                    )
                if on_wait is not None:
                    on_wait(place)
                with self._cond:
                    if not (self._ahead(ticket) == 0 and self._active < self._capacity):
                        left = poll if timeout is None else max(0.0, min(poll, timeout - (time.monotonic() - t0)))
                        self._cond.wait(left)
        except BaseException:
            with self._cond:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                self._urgent.pop(ticket, None)
                self._cond.notify_all()
            raise


_shared: DecodingGate | None = None
_shared_lock = threading.Lock()


def shared_gate(capacity: int) -> DecodingGate:
    """The process's one gate (all sessions of a server share it); `capacity` applies from now."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = DecodingGate(capacity)
        elif _shared.capacity != capacity:
            _shared.set_capacity(capacity)
        return _shared
