"""The narrative's numbers come from the recorded trace, also when the end of the text cuts a cycle.

Every case here is a REAL trace of the tiny pair with an end-of-text token (`build_tiny_pair(seed,
with_eos=True)`), found by searching decoder seeds, never hand-built: an EOS inside the drafts
followed by a rejection (the corrected token is drawn and thrown away), an EOS inside a fully
accepted run (later drafts and the bonus are cut), an EOS as the bonus token, max_new_tokens
reached mid-cycle and the context limit reached mid-cycle. For each, every phase's text is checked
against the trace's own records: the committed tokens, the truncate / free events, the snapshots
and the finish reason (which must appear at resolve and rollback only).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable

import pytest

import specviz
from specviz import narrative
from specviz.config import DecodeConfig
from specviz.outcome import cycle_outcome, dropped_entries, freed_blocks
from specviz.trace import CYCLE_PHASES, CycleTrace

PROMPT = "Hello there"


@functools.cache
def eos_pair():
    return specviz.build_tiny_pair(0, with_eos=True)


def decode(cfg: DecodeConfig, max_cycles: int = 40) -> list[CycleTrace]:
    pair = eos_pair()
    dec = specviz.SpeculativeDecoder(pair, cfg)
    dec.start(pair.tokenizer.encode(PROMPT))
    traces = []
    while not dec.finished and len(traces) < max_cycles:
        traces.append(dec.step())
    return traces


def find_last(make_cfg: Callable[[int], DecodeConfig], wanted: Callable[[CycleTrace], bool]) -> CycleTrace:
    """The final cycle of the first seed whose run ends with a cycle matching `wanted`."""
    for seed in range(80):
        traces = decode(make_cfg(seed))
        if traces and traces[-1].finish_reason and wanted(traces[-1]):
            return traces[-1]
    raise AssertionError("no seed in 0..79 produced the case")


def eos_id() -> int:
    return eos_pair().tokenizer.eos_token_id


def eos_draft(tr: CycleTrace) -> int | None:
    return next((d.index for d in tr.drafts if d.token_id == eos_id() and d.verdict == "accepted"), None)


# The cases: each a function of nothing that returns a real trace.
CASES: dict[str, Callable[[], CycleTrace]] = {
    # An accepted EOS draft, then a rejection: the corrected token is drawn, then cut.
    "eos_in_drafts_then_rejection": lambda: find_last(
        lambda s: DecodeConfig(k=5, seed=s, page_size=4, max_new_tokens=60),
        lambda t: eos_draft(t) is not None and t.rejected_at is not None,
    ),
    # An accepted EOS draft before d_K with every draft accepted: later drafts and the bonus are cut.
    "eos_in_drafts_all_accepted": lambda: find_last(
        lambda s: DecodeConfig(k=5, seed=s, page_size=4, max_new_tokens=60),
        lambda t: t.rejected_at is None and (eos_draft(t) or t.k) < t.k,
    ),
    # Every draft accepted and the bonus token is EOS: nothing is cut, the text still ends.
    "eos_at_bonus": lambda: find_last(
        lambda s: DecodeConfig(k=3, seed=s, page_size=4, max_new_tokens=60),
        lambda t: t.finish_reason == "eos" and t.bonus_token is not None and t.bonus_token.token_id == eos_id(),
    ),
    # The last allowed token is an accepted draft: the bonus is drawn, then cut by max_new_tokens.
    "max_new_tokens_mid_cycle": lambda: find_last(
        lambda s: DecodeConfig(k=2, seed=s, page_size=4, max_new_tokens=4),
        lambda t: t.finish_reason == "max_new_tokens" and t.rejected_at is None and t.bonus_token is None,
    ),
    # The context fills up with an accepted draft: the bonus is cut by the context limit (keep policy).
    "context_full_mid_cycle": lambda: find_last(
        lambda s: DecodeConfig(k=3, seed=s, page_size=4, max_context=len(PROMPT) + 7, free_policy="keep"),
        lambda t: t.finish_reason == "context_full" and t.bonus_token is None,
    ),
}


@functools.cache
def case(name: str) -> CycleTrace:
    return CASES[name]()


def texts(tr: CycleTrace) -> dict[str, str]:
    return {phase: narrative.phase_markdown(tr, phase) for phase in CYCLE_PHASES}


# ---- one check of every phase against the trace, used by every case ---------------------------


def assert_numbers_from_trace(tr: CycleTrace) -> None:
    t = texts(tr)
    n = tr.context_len
    snap = {s.phase: s for s in tr.snapshots}
    # start: the cycle is numbered from 1 and the recorded length is quoted.
    assert f"**Cycle {tr.cycle + 1} starts**" in t["start"]
    assert f"length **{snap['start'].target.seq_len}**" in t["start"]
    # verify: the recorded lengths and the recorded append.
    assert f"{snap['draft'].target.seq_len} → **{snap['verify'].target.seq_len}**" in t["verify"]
    (append,) = [e for e in tr.target_events if e.kind == "append" and e.phase == "verify"]
    assert f"positions {append.start}–{append.end - 1}" in t["verify"]
    # accept: the recorded verdicts.
    assert f"**{tr.num_accepted} of {tr.k} accepted**" in t["accept"]
    # resolve: the committed tokens, counted and listed from `emitted`; no placeholder token.
    m = len(tr.emitted)
    assert re.search(rf"commits (j = |K\+1 = )?\*\*{m}\*\* tokens?\b", t["resolve"]), t["resolve"]
    for e in tr.emitted:
        assert f"(position {e.position}, {e.kind})" in t["resolve"]
    assert "token ?" not in t["resolve"] and " ? " not in t["resolve"]
    out = cycle_outcome(tr)
    if out.cut:
        assert "drawn, then discarded" in t["resolve"]
        assert f"the cut removed {out.cut} of the {out.drawn}" in t["resolve"]
    # rollback: every truncation is quoted with its real count, positions and names.
    new_n = n + m
    for role, events in (("target", tr.target_events), ("draft", tr.draft_events)):
        for cut in dropped_entries(tr, events, new_n):
            lo, hi = cut.length_to, cut.length_from - 1
            where = f"position {lo}" if lo == hi else f"positions {lo}–{hi}"
            noun = "entry" if cut.count == 1 else "entries"
            assert f"({where}: **{cut.count}** {noun}" in t["rollback"], (role, t["rollback"])
    target_cuts = dropped_entries(tr, tr.target_events, new_n)
    if target_cuts:
        assert f"{target_cuts[0].length_from} → **{target_cuts[0].length_to}**" in t["rollback"]
    # Every "drops the K/V of dA … dB (positions X–Y: **N** entries)" is internally consistent, and a
    # quoted textbook K−j+1 equals the recorded count.
    for first, last, lo, hi, count in re.findall(
        r"drops the K/V of (\S+)(?: … (\S+))? \(positions? (\d+)(?:–(\d+))?: \*\*(\d+)\*\*", t["rollback"]
    ):
        width = int(hi or lo) - int(lo) + 1
        assert int(count) == width
        if first.startswith("d") and (last or first).startswith("d"):
            assert int((last or first)[1:]) - int(first[1:]) + 1 == width
    for taught in re.findall(r"K−j\+1 = (\d+)", t["rollback"]):
        assert any(int(taught) == c.count for c in target_cuts)
    freed = freed_blocks(tr.target_events)
    if freed:
        assert f"{len(freed)} block{'s' if len(freed) != 1 else ''} {list(freed)} went back" in t["rollback"]
    assert f"Committed length is now n = {new_n}" in t["rollback"]
    # The finish reason appears where it happens (resolve, rollback) and nowhere before.
    for phase in ("start", "draft", "verify", "accept"):
        assert "finish" not in t[phase].lower(), phase
    if tr.finish_reason:
        assert f"**Generation finishes with this cycle:** {tr.finish_reason}" in t["resolve"]
        assert f"**Generation finished:** {tr.finish_reason}" in t["rollback"]
        assert f"at position {tr.emitted[-1].position}" in t["resolve"]


@pytest.mark.parametrize("name", list(CASES))
def test_every_phase_quotes_the_trace(name):
    tr = case(name)
    assert tr.finish_reason  # every case ends the text
    assert_numbers_from_trace(tr)


def test_eos_in_the_drafts_then_a_rejection_discards_the_corrected_token():
    tr = case("eos_in_drafts_then_rejection")
    e, j = eos_draft(tr), tr.rejected_at
    assert e < j and tr.corrected_token is None and len(tr.emitted) == e
    t = texts(tr)
    assert f"d{e} `<eos>` is the **end-of-text token**" in t["resolve"]
    assert "so the corrected token is thrown away" in t["resolve"]
    assert f"commits **{e}** token{'s' if e != 1 else ''}, not j = {j}" in t["resolve"]
    # Rollback: the textbook "K−j+1" is NOT claimed: the recorded truncation drops more (from d_e on).
    (cut,) = dropped_entries(tr, tr.target_events, tr.context_len + e)
    assert cut.count == tr.k - e + 1 != tr.k - j + 1
    assert "K−j+1" not in t["rollback"]
    assert f"d{e} committed, but now the newest token" in t["rollback"]
    assert f"d{j} rejected" in t["rollback"]


def test_eos_in_accepted_drafts_cuts_the_later_drafts_and_the_bonus():
    tr = case("eos_in_drafts_all_accepted")
    e = eos_draft(tr)
    assert e < tr.k and tr.bonus_token is None and len(tr.emitted) == e
    t = texts(tr)
    assert "so the bonus token and the accepted drafts after the cut are thrown away" in t["resolve"]
    assert f"not K+1 = {tr.k + 1}: the cut removed {tr.k + 1 - e} of the {tr.k + 1} produced" in t["resolve"]
    cut_names = ", ".join(f"d{i}" for i in range(e + 1, tr.k + 1))
    assert f"{cut_names} accepted, then cut off by the end of the text" in t["rollback"]
    assert "removes nothing" not in t["rollback"]


def test_eos_as_the_bonus_token_cuts_nothing():
    tr = case("eos_at_bonus")
    t = texts(tr)
    assert cycle_outcome(tr).cut == 0
    assert f"K+1 = **{tr.k + 1}** tokens ({tr.k} accepted + the bonus token)" in t["resolve"]
    assert "discarded" not in t["resolve"]
    assert "removes nothing: every provisional entry belongs to a committed token" in t["rollback"]
    assert "one short of the target, because d" in t["rollback"]  # d_K was never fed, as always


def test_max_new_tokens_reached_mid_cycle_discards_the_bonus():
    tr = case("max_new_tokens_mid_cycle")
    t = texts(tr)
    assert "the **max-new-tokens limit** is reached" in t["resolve"]
    assert "the bonus token is thrown away" in t["resolve"]
    assert "max_new_tokens — the max-new-tokens limit is reached at position" in t["rollback"]


def test_context_limit_reached_mid_cycle_discards_the_bonus():
    tr = case("context_full_mid_cycle")
    t = texts(tr)
    assert tr.snapshot("rollback").target.policy == "keep"
    assert "the **context is full**" in t["resolve"] and "the bonus token is thrown away" in t["resolve"]
    assert "no block is freed" in t["rollback"] and not freed_blocks(tr.target_events)


def test_an_ordinary_rejection_still_teaches_k_minus_j_plus_one():
    # No cut: the recorded truncation and the textbook count agree, and both are stated.
    tr = next(
        t
        for t in decode(DecodeConfig(k=5, seed=0, page_size=4, max_new_tokens=60))
        if t.rejected_at is not None and t.rejected_at < t.k and not t.finish_reason
    )
    t = texts(tr)
    count = tr.k - tr.rejected_at + 1
    assert f"**{count}** entr{'y' if count == 1 else 'ies'}, K−j+1 = {count})" in t["rollback"]
    assert f"j = **{tr.rejected_at}** token" in t["resolve"]
    assert_numbers_from_trace(tr)


def test_cli_walkthrough_survives_a_cut_corrected_token():
    from specviz.cli import format_cycle

    tr = case("eos_in_drafts_then_rejection")
    text = format_cycle(tr)  # used to assert that a rejection always commits a corrected token
    assert text.startswith(f"=== cycle {tr.cycle + 1}:")
    assert "corrected token drawn, then cut off by the end of the text" in text
    assert f"commit  +{len(tr.emitted)} token(s) (the end of the text cut 1 of the {tr.rejected_at} produced)" in text


@pytest.mark.parametrize("name", list(CASES))
def test_status_line_tells_the_finish_only_where_it_happens(name):
    tr = case(name)
    earlier = [dataclasses.replace(tr, cycle=i, finish_reason=None) for i in range(tr.cycle)]
    traces = [*earlier, tr]
    for phase in CYCLE_PHASES:
        line = narrative.status_markdown(len(PROMPT), traces, tr.cycle, phase, "draft model")
        assert line.startswith(f"cycle **{tr.cycle + 1}** of {len(traces)}")
        told = f"**finished: {tr.finish_reason}** at position {tr.emitted[-1].position}" in line
        assert told == (phase in ("resolve", "rollback")), (phase, line)
    for phase in CYCLE_PHASES if earlier else ():  # an earlier cycle never tells the end
        assert "finished" not in narrative.status_markdown(len(PROMPT), traces, 0, phase, "draft model")


def test_a_broken_invariant_is_exposed_not_asserted():
    # The narrative checks the recorded length against n−1 instead of stating the textbook: a cache
    # left one entry too long (a bookkeeping bug) is called out, not described as correct.
    tr = case("eos_at_bonus")
    rb = tr.snapshot("rollback")
    longer = dataclasses.replace(rb, target=dataclasses.replace(rb.target, seq_len=rb.target.seq_len + 1))
    broken = dataclasses.replace(tr, snapshots=tuple(longer if s.phase == "rollback" else s for s in tr.snapshots))
    new_n = tr.context_len + len(tr.emitted)
    assert "exactly what a plain autoregressive decoder would hold" in narrative.phase_markdown(tr, "rollback")
    text = narrative.phase_markdown(broken, "rollback")
    assert f"holds **{new_n}** positions, not n−1 = {new_n - 1}: **the invariant is broken**" in text
    start = tr.snapshot("start").target.seq_len
    assert f"positions 0–{start - 1} (length **{start}** = n−1)" in narrative.phase_markdown(tr, "start")


def test_greedy_p_vs_q_says_both_are_one_hot():
    from specviz.viz.distributions import pq_figure

    tr = case("context_full_mid_cycle")
    greedy = dataclasses.replace(tr, temperature=0.0)
    assert "greedy (T = 0): p and q are one-hot" in pq_figure(greedy, 1).layout.title.text
    assert "one-hot" not in pq_figure(tr, 1).layout.title.text  # sampled at T = 1: no such note


@pytest.mark.parametrize("proposer", ["draft", "feature"])
def test_the_draft_phase_says_what_was_guessed_before_how_the_cache_caught_up(proposer):
    """A student's first question at the draft phase is what the proposer guessed: the text opens with
    the K guesses, and the catch-up (the pairs or tokens fed first, in words, not `feature@38`) after."""
    tr = decode(DecodeConfig(k=4, seed=0, proposer=proposer), max_cycles=2)[-1]
    text = narrative.phase_markdown(tr, "draft")
    guesses = text.index("guesses the next K = 4 tokens")
    assert guesses < text.index("d1 = ") < text.index("catch-up"), text
    assert "feature@" not in text and "Catch-up:" not in text
