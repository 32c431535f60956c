"""The decoding gate (specviz.gate): at most `capacity` sessions decode at once, the others queue
first come first served, see their place while waiting, and give up with a clear error after the
timeout without losing their place for others; background work (a cycle computed ahead) waits
behind everyone someone waits for, until it is needed."""

from __future__ import annotations

import threading
import time

import pytest

from specviz.gate import DecodingGate, Place, ServerBusyError, shared_gate


def hold_slot(gate: DecodingGate, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    """A thread that takes one of `gate`'s slots and keeps it until `leave` is set (or 60 s pass)."""

    def run() -> None:
        with gate.slot():
            entered.set()
            leave.wait(60)

    t = threading.Thread(target=run)
    t.start()
    assert entered.wait(10)
    return t


def test_a_second_session_waits_sees_its_place_and_then_runs():
    gate = DecodingGate(1)
    entered, leave = threading.Event(), threading.Event()
    holder = hold_slot(gate, entered, leave)
    places: list[Place] = []
    waited: list[float] = []

    def second() -> None:
        with gate.slot(on_wait=places.append, poll=0.05) as w:
            waited.append(w)

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.3)
    assert waited == [] and gate.status() == (1, 1)  # still waiting: the slot is taken
    leave.set()
    t.join(10)
    holder.join(10)
    assert waited and waited[0] >= 0.25
    assert places and places[0].ahead == 0 and places[0].decoding == 1 and places[0].capacity == 1
    assert "you are next" in places[0].message() and "busy" in places[0].message()
    assert gate.status() == (0, 0)


def test_first_come_first_served_and_places_count_down():
    gate = DecodingGate(1)
    entered, leave = threading.Event(), threading.Event()
    holder = hold_slot(gate, entered, leave)
    order: list[int] = []
    first_place: dict[int, int] = {}

    def waiter(i: int) -> None:
        def seen(p: Place) -> None:
            first_place.setdefault(i, p.ahead)

        with gate.slot(on_wait=seen, poll=0.05):
            order.append(i)

    threads = []
    for i in range(3):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        deadline = time.time() + 10
        while gate.status()[1] < i + 1 and time.time() < deadline:  # queued in this order
            time.sleep(0.01)
    assert first_place == {0: 0, 1: 1, 2: 2}
    assert Place(2, 1, 1, 3.0).message().startswith("**The server is busy — 2 ahead of you.**")
    leave.set()
    for t in threads:
        t.join(10)
    holder.join(10)
    assert order == [0, 1, 2]


def test_background_work_goes_after_the_urgent_until_it_is_needed():
    gate = DecodingGate(1)
    entered, leave = threading.Event(), threading.Event()
    holder = hold_slot(gate, entered, leave)
    order: list[str] = []
    needed = threading.Event()

    def waiter(name: str, urgent=None) -> threading.Thread:
        def run() -> None:
            with gate.slot(poll=0.05, urgent=urgent):
                order.append(name)
                time.sleep(0.05)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.15)  # queued in this order
        return t

    threads = [waiter("prefetch A", lambda: False), waiter("prefetch B", needed.is_set),
               waiter("click 1"), waiter("click 2")]
    needed.set()  # a click of B's session now waits for B's prefetch
    gate.nudge()
    leave.set()
    for t in [holder, *threads]:
        t.join(10)
    # The clicks first (B is urgent too now, and came before them), the background last.
    assert order == ["prefetch B", "click 1", "click 2", "prefetch A"], order


def test_never_more_than_capacity_at_once():
    gate = DecodingGate(2)
    active = peak = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal active, peak
        with gate.slot(poll=0.01):
            with lock:
                active += 1
                peak = max(peak, active)
            time.sleep(0.05)
            with lock:
                active -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert peak == 2 and gate.status() == (0, 0)


def test_timeout_raises_a_clear_error_and_leaves_the_queue():
    gate = DecodingGate(1)
    entered, leave = threading.Event(), threading.Event()
    holder = hold_slot(gate, entered, leave)
    try:
        with pytest.raises(ServerBusyError, match="busy.*try again"):
            with gate.slot(timeout=0.2, poll=0.05):
                pytest.fail("must not get a slot")
        assert gate.status() == (1, 0)  # the timed-out session left the queue
    finally:
        leave.set()
        holder.join(10)
    with gate.slot(timeout=1) as waited:  # free again, at once
        assert waited < 0.5


def test_slots_are_reentrant_within_one_thread_and_free_is_immediate():
    gate = DecodingGate(1)
    calls: list[Place] = []
    with gate.slot(on_wait=calls.append) as w1:
        with gate.slot(on_wait=calls.append, timeout=0.5) as w2:  # e.g. a prefill inside a step
            assert gate.status() == (1, 0)
    assert calls == [] and w1 < 0.5 and w2 == 0.0
    assert gate.status() == (0, 0)


def test_shared_gate_is_one_per_process_and_follows_the_setting():
    g = shared_gate(3)
    assert shared_gate(3) is g and g.capacity == 3
    assert shared_gate(1) is g and g.capacity == 1
