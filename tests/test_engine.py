"""The speculative decoder keeps both caches exact, matches greedy generate, and refuses bad input
without changing its state."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
import torch
from engine_helpers import LAYOUT_CASES, TOL, assert_invariant, make_pair

from specviz import DecodeConfig, SpeculativeDecoder
from specviz.autoregressive import AutoregressiveDecoder
from specviz.cli import main as cli_main
from specviz.errors import (
    ConfigError,
    ContextFullError,
    DecodingFinishedError,
    PoolExhaustedError,
    PromptError,
)
from specviz.trace import CYCLE_PHASES, CycleTrace

PROMPT = [3, 17, 42, 5, 9, 28, 11]


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama")


def run_cycles(dec: SpeculativeDecoder, cycles: int) -> list[CycleTrace]:
    return [dec.step() for _ in range(cycles) if not dec.finished]


# --------------------------------------------------------------------------- cache invariant


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize(("layout", "page_size", "policy"), LAYOUT_CASES)
def test_invariant_after_every_cycle(pair, k, layout, page_size, policy):
    cfg = DecodeConfig(k=k, temperature=1.0, seed=k, cache_layout=layout, page_size=page_size,
                       free_policy=policy, max_new_tokens=40, check_invariant=True)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    assert_invariant(dec)
    traces = run_cycles(dec, 12)
    kinds = {t.emitted[-1].kind for t in traces}
    for trace in traces:
        assert trace.invariant_max_abs_diff is not None
        assert max(trace.invariant_max_abs_diff.values()) < TOL
    assert_invariant(dec)
    # The cycles exercised both endings (needs a few cycles of a disagreeing draft).
    if k <= 3:
        assert kinds == {"corrected", "bonus"}, kinds


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_invariant_other_architectures(arch):
    pair = make_pair(arch)
    for layout in ("paged", "contiguous"):
        dec = SpeculativeDecoder(pair, DecodeConfig(k=4, cache_layout=layout, page_size=3, max_new_tokens=30))
        dec.start(PROMPT)
        for _ in range(6):
            dec.step()
            assert_invariant(dec)


def test_draft_lags_one_token_after_full_acceptance(pair):
    # Force every draft to be accepted: the draft never fed d_K, so it catches up on two tokens.
    cfg = DecodeConfig(k=3, forced_outcomes=((1, True), (2, True), (3, True)), max_new_tokens=30)
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    first = dec.step()
    assert first.num_accepted == 3 and first.emitted[-1].kind == "bonus"
    n = len(dec.committed)
    assert dec.draft_cache.get_seq_length() == n - 2
    second = dec.step()
    assert [t.token_id for t in second.catch_up] == dec.committed[n - 2 : n]
    assert_invariant(dec)


def test_live_config_change_keeps_history_and_invariant(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=2, temperature=1.0, max_new_tokens=60))
    dec.start(PROMPT)
    dec.step()
    before = dec.committed
    dec.update_config(dataclasses.replace(dec.config, k=7, temperature=0.5, top_k=10, top_p=0.9))
    trace = dec.step()
    assert trace.k == 7 and trace.temperature == 0.5
    assert dec.committed[: len(before)] == before
    assert_invariant(dec)
    with pytest.raises(ConfigError, match="cache_layout"):
        dec.update_config(dataclasses.replace(dec.config, cache_layout="contiguous"))
    assert dec.config.k == 7


# --------------------------------------------------------------------------- greedy equality


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize(("layout", "k"), [("paged", 1), ("paged", 4), ("contiguous", 3), ("contiguous", 8)])
def test_greedy_equals_target_generate(arch, layout, k):
    pair = make_pair(arch)
    new = 24
    ids = torch.tensor([PROMPT])
    reference = pair.target.generate(ids, do_sample=False, max_new_tokens=new, min_new_tokens=new)[0].tolist()
    dec = SpeculativeDecoder(pair, DecodeConfig(k=k, temperature=0, cache_layout=layout, page_size=4,
                                                max_new_tokens=new))
    dec.start(PROMPT)
    dec.generate()
    assert dec.committed == reference
    ar = AutoregressiveDecoder(pair.target, DecodeConfig(temperature=0, cache_layout=layout, max_new_tokens=new))
    ar.start(PROMPT)
    assert ar.committed + ar.generate() == reference


# --------------------------------------------------------------------------- trace content


def test_trace_records_every_phase_and_round_trips(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=4, page_size=3, check_invariant=True))
    dec.start(PROMPT)
    for trace in run_cycles(dec, 4):
        assert [s.phase for s in trace.snapshots] == list(CYCLE_PHASES)
        assert len(trace.drafts) == trace.k
        verdicts = [d.verdict for d in trace.drafts]
        assert verdicts[: trace.num_accepted] == ["accepted"] * trace.num_accepted
        if trace.rejected_at is not None:
            assert verdicts[trace.rejected_at - 1] == "rejected"
            assert set(verdicts[trace.rejected_at :]) <= {"untested"}
            assert trace.residual_top and not trace.bonus_top
        else:
            assert trace.bonus_top and not trace.residual_top
        verify = trace.snapshot("verify").target
        assert verify.seq_len == trace.context_len + trace.k
        assert trace.snapshot("rollback").target.seq_len == trace.context_len + len(trace.emitted) - 1
        assert any(e.kind == "append" and e.phase == "verify" for e in trace.target_events)
        data = json.loads(json.dumps(trace.to_dict()))
        assert CycleTrace.from_dict(data) == trace


def test_forced_walkthrough_scenario(pair):
    cfg = DecodeConfig(k=5, forced_outcomes=((1, True), (2, True), (3, True), (4, False)))
    dec = SpeculativeDecoder(pair, cfg)
    dec.start(PROMPT)
    trace = dec.step()
    assert trace.num_accepted == 3 and trace.rejected_at == 4 and trace.forced
    assert [e.kind for e in trace.emitted] == ["accepted"] * 3 + ["corrected"]
    assert [d.verdict for d in trace.drafts] == ["accepted"] * 3 + ["rejected", "untested"]
    assert_invariant(dec)


def test_eos_inside_accepted_drafts_ends_the_sequence(pair):
    probe = SpeculativeDecoder(pair, DecodeConfig(k=6, temperature=0, max_new_tokens=30))
    probe.start(PROMPT)
    trace = probe.step()
    while trace.num_accepted < 2:
        trace = probe.step()
    stop_token = trace.emitted[1].token_id  # an accepted draft, not the last emitted token
    stop_at = probe.committed.index(stop_token, len(PROMPT))

    dec = SpeculativeDecoder(pair, DecodeConfig(k=6, temperature=0, max_new_tokens=30))
    dec.eos_ids = frozenset({stop_token})
    dec.start(PROMPT)
    dec.generate()
    assert dec.finish_reason == "eos"
    assert dec.committed == probe.committed[: stop_at + 1]
    assert_invariant(dec)
    with pytest.raises(DecodingFinishedError):
        dec.step()


def test_max_new_tokens_is_exact(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=8, max_new_tokens=13))
    dec.start(PROMPT)
    dec.generate()
    assert len(dec.committed) - len(PROMPT) == 13 and dec.finish_reason == "max_new_tokens"
    assert_invariant(dec)


def test_stops_cleanly_at_full_context(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=8, max_context=len(PROMPT) + 10, max_new_tokens=100))
    dec.start(PROMPT)
    dec.generate()
    assert dec.finish_reason == "context_full" and len(dec.committed) == len(PROMPT) + 10
    assert dec.target_cache.get_seq_length() == len(dec.committed) - 1


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "changes",
    [dict(k=0), dict(k=10_000), dict(temperature=-0.1), dict(temperature=float("nan")), dict(top_p=0.0),
     dict(top_p=1.5), dict(top_k=-1), dict(page_size=0), dict(cache_layout="ring"), dict(free_policy="lazy")],
)
def test_bad_config_is_a_clear_error(changes):
    with pytest.raises(ConfigError):
        DecodeConfig(**changes)


def _state(dec: SpeculativeDecoder) -> tuple:
    snap = dec.target_cache.snapshot(len(dec.committed))
    return (dec.committed, dec.target_cache.get_seq_length(), dec.draft_cache.get_seq_length(),
            snap.block_table, snap.free_blocks)


def test_bad_prompts_leave_state_unchanged(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=3, max_context=64))
    dec.start(PROMPT)
    dec.step()
    before = _state(dec)
    with pytest.raises(PromptError, match="empty"):
        dec.start([])
    with pytest.raises(PromptError, match="context"):
        dec.start([3] * 64)
    with pytest.raises(PromptError, match="vocabulary"):
        dec.start([3, 10_000])
    assert _state(dec) == before
    dec.step()  # still usable


def test_pool_exhaustion_is_a_clear_error_and_changes_nothing(pair):
    # 3 blocks of 4 slots: the prompt (7 tokens) fits, but K = 8 drafts do not.
    dec = SpeculativeDecoder(pair, DecodeConfig(k=8, page_size=4, num_blocks=3))
    dec.start(PROMPT)
    before = _state(dec)
    rng_before = [g.get_state() for g in dec._session.generators.values()]
    with pytest.raises(PoolExhaustedError, match="block"):
        dec.step()
    assert _state(dec) == before
    assert all(torch.equal(a, g.get_state()) for a, g in zip(rng_before, dec._session.generators.values()))
    dec.update_config(dataclasses.replace(dec.config, k=1))
    trace = dec.step()  # a smaller K fits: the decoder kept working
    assert trace.k == 1
    assert_invariant(dec)


def test_context_full_error_when_stepping_past_the_end(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=2, max_context=len(PROMPT) + 1))
    dec.start(PROMPT)
    dec.step()
    assert dec.finish_reason == "context_full"
    with pytest.raises((ContextFullError, DecodingFinishedError)):
        dec.step()


def test_step_before_start_is_a_clear_error(pair):
    with pytest.raises(DecodingFinishedError, match="start"):
        SpeculativeDecoder(pair).step()


# --------------------------------------------------------------------------- CLI


def test_cli_walk_tiny_prints_the_walkthrough(tmp_path):
    out = io.StringIO()
    path = tmp_path / "traces.json"
    code = cli_main(["walk", "--tiny", "--cycles", "3", "--k", "4", "--page-size", "4", "--check",
                     "--json", str(path)], out=out)
    text = out.getvalue()
    assert code == 0
    assert text.count("=== cycle") == 3
    for needle in ("catch-up", "min(1, p/q)", "verify  target ran ONE pass over 5 inputs", "truncate length",
                   "cache vs fresh prefill"):
        assert needle in text, needle
    traces = [CycleTrace.from_dict(d) for d in json.loads(path.read_text())]
    assert len(traces) == 3


def test_cli_reports_bad_input_without_traceback(capsys):
    assert cli_main(["walk", "--tiny", "--k", "0"], out=io.StringIO()) == 2
    assert "K (draft length)" in capsys.readouterr().err


# --------------------------------------------------------------------------- fork


def test_fork_continues_identically_and_independently(pair):
    dec = SpeculativeDecoder(pair, DecodeConfig(k=3, page_size=3, max_new_tokens=40))
    dec.start(PROMPT)
    run_cycles(dec, 3)
    twin = dec.fork()
    assert twin.committed == dec.committed
    twin_traces = run_cycles(twin, 3)
    assert_invariant(twin)
    assert len(dec.committed) < len(twin.committed)  # the original did not move
    own_traces = run_cycles(dec, 3)
    assert [t.emitted for t in own_traces] == [t.emitted for t in twin_traces]  # same random stream


def test_reseeded_forks_sample_different_continuations(pair):
    base = SpeculativeDecoder(pair, DecodeConfig(k=3, max_new_tokens=40))
    base.start(PROMPT)
    endings = set()
    for seed in range(6):
        twin = base.fork(seed=seed)
        run_cycles(twin, 2)
        assert_invariant(twin)
        endings.add(tuple(twin.committed))
    assert len(endings) > 1
    ar = AutoregressiveDecoder(pair.target, DecodeConfig(max_new_tokens=5))
    ar.start(PROMPT)
    a, b = ar.fork(seed=1), ar.fork(seed=1)
    assert a.generate() == b.generate() and ar.committed == PROMPT


def test_cli_walk_lets_the_cost_law_choose_k(capsys):
    out = io.StringIO()
    assert cli_main(["walk", "--tiny", "--cycles", "3", "--k", "auto", "--temperature", "0"], out=out) == 0
    text = out.getvalue()
    assert text.count("(chosen by the cost law)") == 3, text
    # Each cycle says why: the drafts it chose and their expected worth, or why a plain step.
    assert text.count("auto    ") + text.count("plain step: no K gains") == 3, text
    with pytest.raises(SystemExit):
        cli_main(["walk", "--tiny", "--k", "many"], out=io.StringIO())
    assert "expected a whole number or 'auto'" in capsys.readouterr().err
