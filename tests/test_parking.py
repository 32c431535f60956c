"""Idle sessions (specviz.parking): a parked decoder frees its caches, and the rebuilt one continues
the run exactly as an uninterrupted decoder does; the registry releases only idle, unbusy sessions."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
import weakref

import pytest

from specviz import DecodeConfig, DecodingFinishedError, SpeculativeDecoder, build_tiny_pair
from specviz.parking import IdleRegistry, park, resume
from specviz.proposers import registry

PROMPT = "the quick brown fox jumps over the lazy dog and the fox"


@pytest.fixture(scope="module")
def pair():
    return build_tiny_pair(seed=0)


def _run(pair, cfg, cycles):
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(pair.tokenizer.encode(PROMPT))
    for _ in range(cycles):
        if not dec.finished:
            dec.step()
    return dec


@pytest.mark.parametrize("proposer", registry.names())
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_a_rebuilt_decoder_continues_exactly_like_an_uninterrupted_one(pair, proposer, temperature):
    cfg = DecodeConfig(proposer=proposer, k=3, temperature=temperature, seed=7, max_new_tokens=40, page_size=4)
    straight = _run(pair, cfg, 10)
    dec = _run(pair, cfg, 4)
    parked = park(dec)
    generated = len(dec.committed) - len(pair.tokenizer.encode(PROMPT))
    assert len(parked.committed) - parked.num_prompt_tokens == generated > 0
    back = resume(pair, parked)
    assert back.committed == dec.committed and back.origins == dec.origins
    assert back.num_prompt_tokens == dec.num_prompt_tokens
    assert back.target_cache.get_seq_length() == len(back.committed) - 1  # the invariant's start
    assert max(back.check_invariant().values()) < 1e-4
    for _ in range(6):
        if not back.finished:
            back.step()
    assert back.committed == straight.committed  # same tokens: the random streams went on
    assert back.origins == straight.origins
    assert back.finish_reason == straight.finish_reason
    assert max(back.check_invariant().values()) < 1e-4


def test_parking_frees_the_caches(pair):
    dec = _run(pair, DecodeConfig(k=3, seed=1), 2)
    target, draft = weakref.ref(dec.target_cache), weakref.ref(dec.draft_cache)
    parked = park(dec)
    del dec
    gc.collect()
    assert target() is None and draft() is None
    assert resume(pair, parked).target_cache is not None


@pytest.mark.parametrize("proposer", [p for p in registry.names() if "retrieval" in p])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_run_parked_by_the_idle_sweep_keeps_its_sessions_texts_and_continues_exactly(pair, proposer, temperature):
    """The idle sweep releases the caches, not the session's earlier texts: a resumed retrieval run
    drafts from them as the uninterrupted one does (it cleared them, and the resumed run diverged)."""
    from specviz.ui.actions import park_idle, wake_shown
    from specviz.ui.state import Workspace, start_live_run

    prompt = pair.tokenizer.encode(PROMPT)
    cfg = DecodeConfig(proposer=proposer, k=3, temperature=temperature, seed=5, max_new_tokens=40)
    earlier = _run(pair, dataclasses.replace(cfg, seed=9), 12)  # an earlier text of this session

    def workspace():
        ws = Workspace()
        ws.session_texts.add(earlier.committed)
        ws.add(start_live_run(1, "t", (), pair, cfg, prompt, session_texts=ws.session_texts))
        return ws

    straight, parked = workspace(), workspace()
    for _ in range(4):
        straight.run.dec.step()
        parked.run.dec.step()
    assert park_idle(parked) and parked.run.dec is None and len(parked.session_texts) == len(earlier.committed)
    wake_shown(parked, contextlib.nullcontext)
    assert parked.run.dec.session_texts is parked.session_texts  # handed back on resume
    notes = []
    for _ in range(8):
        if not straight.run.dec.finished:
            want, got = straight.run.dec.step(), parked.run.dec.step()
            assert [d.token_id for d in got.drafts] == [d.token_id for d in want.drafts]  # the same proposals
            notes.append(want.proposer_note)
    assert parked.run.dec.committed == straight.run.dec.committed
    if proposer == "retrieval":  # (the merged proposer may prefer its head on this tiny pair)
        assert any("session" in note for note in notes), notes  # the earlier text was drafted from


def test_a_finished_run_is_rebuilt_finished(pair):
    cfg = DecodeConfig(k=4, seed=3, max_new_tokens=6)
    dec = _run(pair, cfg, 20)
    assert dec.finished
    back = resume(pair, park(dec))
    assert back.finished and back.finish_reason == dec.finish_reason == "max_new_tokens"
    assert back.committed == dec.committed
    with pytest.raises(DecodingFinishedError):
        back.step()


def test_a_run_that_filled_the_context_is_rebuilt(pair):
    n = len(pair.tokenizer.encode(PROMPT))
    dec = _run(pair, DecodeConfig(k=4, seed=3, max_context=n + 5, max_new_tokens=100), 20)
    assert dec.finish_reason == "context_full" and len(dec.committed) == n + 5
    back = resume(pair, park(dec))
    assert back.committed == dec.committed and back.finish_reason == "context_full"


class Item:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_active = 0.0
        self.released = False


def test_registry_releases_only_idle_unbusy_sessions():
    reg = IdleRegistry()
    idle, fresh, busy = Item(), Item(), Item()
    reg.touch(idle, now=0.0)
    reg.touch(busy, now=0.0)
    reg.touch(fresh, now=95.0)

    def release(item: Item) -> bool:
        assert item.lock.locked()  # released under the session's own lock
        item.released = True
        return True

    busy.lock.acquire()
    try:
        assert reg.sweep(60, release, now=100.0) == 1
    finally:
        busy.lock.release()
    assert idle.released and not fresh.released and not busy.released
    assert reg.sweep(0, release, now=10_000.0) == 0  # 0 = never
    assert len(reg) == 3
    del idle
    gc.collect()
    assert len(reg) == 2  # a closed session just disappears
