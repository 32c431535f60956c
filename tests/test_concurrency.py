"""Sessions of one server share the model pair read-only and must never disturb each other.

Two decoders on ONE shared tiny pair step at the same moment in two threads (a barrier before
every step, so their forward passes overlap) and must commit exactly the tokens, and record
exactly the drafts, that each commits when run alone. For the feature-head proposer this once
failed: the target's features were caught by a forward hook on the shared output head, and a
hook fires for every caller, so one session's verify pass could hand its features to the other
(`runtime.output_head_inputs` now keeps only its own thread's passes). The invariant check, which
catches the target's features of a fresh prefill the same way, runs inside the threads too.
"""

from __future__ import annotations

import threading

import pytest

from specviz import DecodeConfig, SpeculativeDecoder, build_tiny_pair

CYCLES = 10
SESSIONS = (("the sky is blue because", 1), ("why do leaves fall in autumn", 2))


@pytest.fixture(scope="module")
def shared_pair():
    return build_tiny_pair(seed=0)


def _decode(pair, proposer: str, prompt: str, seed: int, barrier: threading.Barrier | None = None):
    cfg = DecodeConfig(proposer=proposer, k=4, seed=seed, temperature=1.0, max_new_tokens=200,
                       check_invariant=True)  # runs a fresh target prefill inside every step
    dec = SpeculativeDecoder(pair, cfg)
    if barrier is not None:
        barrier.wait(timeout=60)
    dec.start(pair.tokenizer.encode(prompt))
    drafts = []
    for _ in range(CYCLES):
        if barrier is not None:
            barrier.wait(timeout=60)  # both sessions enter step() together
        if dec.finished:
            continue  # keep meeting the barrier so the other session is not left waiting
        tr = dec.step()
        assert max(tr.invariant_max_abs_diff.values()) < 1e-4, tr.invariant_max_abs_diff
        drafts.append(tuple(d.token_id for d in tr.drafts))
    return dec.committed, drafts, dec


@pytest.mark.parametrize("proposer", ["draft", "feature"])
def test_two_sessions_stepping_concurrently_commit_what_they_commit_alone(shared_pair, proposer):
    alone = [_decode(shared_pair, proposer, prompt, seed)[:2] for prompt, seed in SESSIONS]
    assert alone[0][0] != alone[1][0]  # different runs: a swap between sessions would show
    for _trial in range(3):
        barrier = threading.Barrier(len(SESSIONS))
        results: list = [None] * len(SESSIONS)
        errors: list[BaseException] = []

        def work(i: int, barrier: threading.Barrier = barrier, results: list = results, errors: list = errors) -> None:
            try:
                results[i] = _decode(shared_pair, proposer, *SESSIONS[i], barrier=barrier)
            except BaseException as exc:  # reported below, in the test's own thread
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(SESSIONS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors
        for (committed, drafts, dec), (want_committed, want_drafts) in zip(results, alone, strict=True):
            assert committed == want_committed
            assert drafts == want_drafts
            assert max(dec.check_invariant().values()) < 1e-4
