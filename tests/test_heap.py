"""The frozen heap (specviz.heap): what is frozen is skipped by collections until the next settle,
what is made afterwards is collected as before."""

from __future__ import annotations

import gc
import weakref

import pytest

from specviz import heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def _unfreeze_after():
    yield
    gc.unfreeze()


def test_settle_freezes_what_is_alive():
    assert heap.settle() > 0
    gc.collect()
    assert gc.get_freeze_count() > 0  # a collection does not thaw anything


def test_cycles_made_after_settling_are_still_collected():
    heap.settle()
    node = Node()
    ref = weakref.ref(node)
    del node
    gc.collect()
    assert ref() is None


def test_frozen_cycles_wait_for_the_next_settle():
    node = Node()
    ref = weakref.ref(node)
    heap.settle()  # the cycle is alive here: it is frozen
    del node
    gc.collect()
    assert ref() is not None  # skipped by the collection after a script run
    heap.settle()
    assert ref() is None  # the next settle unfreezes first, so it is collected


def test_settle_after_the_sweep_only_when_something_may_be_frozen_garbage():
    heap.settle_if_sessions_left(5, 0)  # the baseline: five sessions
    assert not heap.settle_if_sessions_left(6, 0)  # one more session, nothing released
    assert heap.settle_if_sessions_left(6, 1)  # the sweep released a decoder
    assert heap.settle_if_sessions_left(4, 0)  # sessions went away
    assert not heap.settle_if_sessions_left(4, 0)
