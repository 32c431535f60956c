"""Scoped what-if (specviz.whatif) and statistics that explain themselves (stats, viz.statistics).

What-if runs on REAL tiny-pair decoders with an end-of-text token: a forced cycle equals the
same cycle run by hand on an identical decoder, and a forced acceptance of an end-of-text draft
never ends the text — forcing stops there and the real test decides. The statistics are checked
on simulated traces with known timings: the speedup decomposes exactly into the measured verify
cost v(K), the bookkeeping and the run's own tokens per cycle; forced cycles are marked in the
time bar, the token strip and the history table, and left out of every number.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
from sample_traces import demo_traces

import specviz
from specviz import narrative, stats, whatif
from specviz.config import DecodeConfig
from specviz.trace import CYCLE_PHASES
from specviz.viz import proposals, statistics, tokens

ALL_ACCEPTED = tuple((i, True) for i in range(1, 6))


@functools.cache
def eos_pair():
    return specviz.build_tiny_pair(0, with_eos=True)


def started(seed: int, **config) -> specviz.SpeculativeDecoder:
    pair = eos_pair()
    dec = specviz.SpeculativeDecoder(pair, DecodeConfig(**{"k": 5, "seed": seed, "page_size": 4, **config}))
    dec.start(pair.tokenizer.encode("Hello there"))
    return dec


def find_forced_eos(text_goes_on: bool) -> tuple[specviz.SpeculativeDecoder, whatif.ForcedStep]:
    """A decoder (forcing every draft accepted) whose forced cycle hits an end-of-text draft, and
    that cycle's forced_step result; `text_goes_on`: the real test then rejects the EOS draft."""
    for seed in range(40):
        dec = started(seed, max_new_tokens=80)
        for _ in range(40):
            if dec.finished:
                break
            probe = dec.fork()
            probe.update_config(probe.config.replace(forced_outcomes=ALL_ACCEPTED))
            twin = probe.fork()
            result = whatif.forced_step(probe)
            if result.stopped_at is not None and (not result.decoder.finished) == text_goes_on:
                return twin, result
            dec.step()
    raise AssertionError("no forced acceptance of an end-of-text draft in 40 seeds")


# ---- what-if ---------------------------------------------------------------------------------------


def test_forced_step_without_eos_equals_the_same_forced_cycle_run_by_hand():
    dec = started(2, temperature=1.0, forced_outcomes=((1, True), (2, False)))
    twin = dec.fork()
    result = whatif.forced_step(dec)
    by_hand = twin.step()
    assert result.stopped_at is None and result.trace.forced
    assert [d.verdict for d in result.trace.drafts][:2] == ["accepted", "rejected"]
    assert result.trace.emitted == by_hand.emitted and result.trace.drafts == by_hand.drafts
    assert result.decoder is dec and dec.committed == twin.committed


def test_forced_acceptance_never_ends_the_text_at_an_end_of_text_draft():
    twin, result = find_forced_eos(text_goes_on=True)
    tr, e = result.trace, result.stopped_at
    eos = eos_pair().tokenizer.eos_token_id
    assert tr.drafts[e - 1].token_id == eos
    assert not tr.drafts[e - 1].forced and tr.drafts[e - 1].verdict == "rejected"  # the real test decided
    assert all(d.forced and d.verdict == "accepted" for d in tr.drafts[: e - 1])  # forcing before it applied
    assert not result.decoder.finished and tr.finish_reason is None
    assert eos not in [t.token_id for t in tr.emitted]
    # Identical to running the cycle by hand with the forcing cut before the EOS draft.
    twin.update_config(twin.config.replace(forced_outcomes=tuple((i, ok) for i, ok in ALL_ACCEPTED if i < e)))
    assert twin.step().emitted == tr.emitted
    # The decoder keeps the caller's forced outcomes until the caller clears them (exact_again).
    assert result.decoder.config.forced_outcomes == ALL_ACCEPTED
    whatif.exact_again(result.decoder)
    assert result.decoder.config.forced_outcomes == ()
    notes = whatif.notices(result, ALL_ACCEPTED)
    assert f"d{e} is the end-of-text token, so forcing stopped there" in notes[1]
    assert "so the text goes on" in notes[1] and f"cycle {tr.cycle + 1} only" in notes[0]


def test_if_the_target_itself_accepts_the_eos_draft_the_text_ends_and_the_note_says_why():
    _, result = find_forced_eos(text_goes_on=False)
    tr, e = result.trace, result.stopped_at
    assert not tr.drafts[e - 1].forced and tr.drafts[e - 1].verdict == "accepted"
    assert tr.finish_reason == "eos"
    assert "the target itself accepted it, so the text ends here" in whatif.notices(result, ALL_ACCEPTED)[1]


# ---- statistics: forced cycles out, the speedup explained --------------------------------------------


def test_forced_cycles_are_out_of_every_statistic_but_marked_where_cycles_are_listed():
    _, traces = demo_traces(accepted_counts=(3, 5, 1), k=5)
    traces = [traces[0], dataclasses.replace(traces[1], forced=True), traces[2]]
    exact = [traces[0], traces[2]]
    st = stats.acceptance_stats(traces)
    assert st.forced_cycles == 1 and st.cycles == 2
    assert st.accepted_hist == stats.acceptance_stats(exact).accepted_hist  # the all-accepted cycle is gone
    rep, rep_exact = stats.measured_speedup(traces, 30.0), stats.measured_speedup(exact, 30.0)
    assert rep.theoretical_speedup == pytest.approx(rep_exact.theoretical_speedup)
    assert rep.measured_speedup == pytest.approx(rep_exact.measured_speedup)
    assert rep.costs == rep_exact.costs
    rows = stats.cycle_rows(traces)
    assert [r["cycle"] for r in rows] == [1, 2, 3]  # numbered from 1
    assert [bool(r["forced"]) for r in rows] == [False, True, False]
    fig = statistics.cycle_time_figure(stats.cycle_costs(traces), 30.0)
    assert list(fig.data[0].x) == ["1", "2 what-if", "3"]
    assert list(fig.data[0].marker.pattern.shape) == ["", "/", ""]
    assert "1 hatched what-if cycle(s): not in the statistics" in fig.layout.title.text
    title = statistics.stats_figure(st, rep).layout.title.text
    assert "1 forced (what-if) cycle(s) excluded" in title


def test_the_speedup_decomposes_exactly_into_measured_costs():
    _, traces = demo_traces(accepted_counts=(3, 5, 0, 2), k=5)  # draft 8 ms/draft, verify 60 ms
    plain = 20.0
    rep = stats.measured_speedup(traces, plain)
    costs = rep.costs
    n = len(traces)
    assert costs.verify == pytest.approx(60.0 / plain) == rep.verify_cost  # v(K) = verify ms ÷ plain ms/token
    assert costs.draft == pytest.approx(sum(t.timings_ms["draft"] for t in traces) / n / plain)
    book = sum(t.timings_ms[p] for t in traces for p in ("accept", "resolve", "rollback")) / n / plain
    assert costs.bookkeeping == pytest.approx(book)
    assert rep.theory_with_pass_costs == pytest.approx(rep.expected_tokens_per_cycle / (costs.draft + costs.verify))
    assert rep.theory_with_bookkeeping == pytest.approx(rep.expected_tokens_per_cycle / costs.total)
    # The last step of the explanation IS the measurement: this run's tokens over the same costs.
    assert rep.measured_speedup == pytest.approx(rep.measured_tokens_per_cycle / costs.total)
    text = narrative.explain_speedup(rep)
    for needle in (
        f"**Measured {rep.measured_speedup:.2f}× vs theory {rep.theoretical_speedup:.2f}×.**",
        f"**v(K) = {costs.verify:.2f}** plain steps (60.0 ms vs 20.0 ms per plain token)",
        f"the formula predicts **{rep.theory_with_pass_costs:.2f}×**",
        f"which gives **{rep.theory_with_bookkeeping:.2f}×**",
        f"this run committed {rep.measured_tokens_per_cycle:.2f} tokens per cycle",
    ):
        assert needle in text, needle
    bars = statistics.speedup_figure(rep).data[0]
    assert list(bars.y) == pytest.approx(
        [rep.theoretical_speedup, rep.theory_with_pass_costs, rep.theory_with_bookkeeping, rep.measured_speedup]
    )


def test_without_a_baseline_the_explanation_asks_for_one():
    _, traces = demo_traces(accepted_counts=(3,), k=5)
    rep = stats.measured_speedup(traces, None)
    assert rep.costs is None and rep.verify_cost is None and rep.theory_with_pass_costs is None
    assert "Run the **autoregressive baseline**" in narrative.explain_speedup(rep)


def test_time_bars_stack_each_cycles_phases_and_axes_start_at_zero():
    _, traces = demo_traces(accepted_counts=(3, 5), k=5)
    fig = statistics.cycle_time_figure(stats.cycle_costs(traces), 25.0)
    bars = [d for d in fig.data if d.type == "bar"]
    assert [b.name for b in bars][:2] == ["proposer passes (draft)", "target verify pass"]
    for i, t in enumerate(traces):
        assert sum(b.y[i] for b in bars) == pytest.approx(stats.cycle_ms(t))
    plain = next(d for d in fig.data if d.type == "scatter")
    assert list(plain.y) == [len(t.emitted) * 25.0 for t in traces]
    assert fig.layout.yaxis.rangemode == "tozero"
    st_fig = statistics.stats_figure(stats.acceptance_stats(traces), stats.measured_speedup(traces, 25.0))
    assert st_fig.layout.yaxis.rangemode == "tozero" and st_fig.layout.yaxis3.rangemode == "tozero"
    assert st_fig.layout.xaxis3.rangemode == "tozero"


# ---- views: forced marks, greedy q, numbering from 1 --------------------------------------------------


def test_token_strip_marks_forced_cycles_in_hover_and_legend():
    prompt, traces = demo_traces(accepted_counts=(2, 3), k=4)
    traces = [traces[0], dataclasses.replace(traces[1], forced=True)]
    text = lambda t: f"t{t}"  # noqa: E731
    chips = tokens.strip_chips(prompt, traces, text, 1, "rollback")
    forced = [c for c in chips if c.forced]
    assert [c.position for c in forced] == [e.position for e in traces[1].emitted]
    assert all("WHAT-IF" in c.tooltip and "cycle 2" in c.tooltip for c in forced)
    assert all("cycle 1" in c.tooltip and not c.forced for c in chips if c.kind != "prompt" and c not in forced)
    html = tokens.strip_html(chips)
    assert "what-if (forced) cycle" in html and tokens.FORCED_STYLE in html
    assert "what-if (forced) cycle" not in tokens.strip_html(tokens.strip_chips(prompt, traces, text, 0, "rollback"))


def test_greedy_proposals_say_that_q_is_one_hot():
    (tr,) = specviz_trace(temperature=0.0)
    fig = proposals.proposals_figure(tr)
    assert all(len(d.draft_top) == 1 and d.draft_top[0].prob == 1.0 for d in tr.drafts)  # what the chart shows
    assert "greedy, one-hot q" in fig.layout.title.text and "q = 1 here is the rule, not confidence" in (
        fig.layout.title.text
    )
    (sampled,) = specviz_trace(temperature=1.0)
    assert "one-hot" not in proposals.proposals_figure(sampled).layout.title.text


def specviz_trace(**config):
    pair = specviz.build_tiny_pair(0)
    dec = specviz.SpeculativeDecoder(pair, DecodeConfig(k=3, page_size=4, **config))
    dec.start(pair.tokenizer.encode("Hello there"))
    return [dec.step()]


def test_narrative_and_status_number_cycles_from_one_and_flag_forced_cycles():
    _, traces = demo_traces(accepted_counts=(3, 5), k=5)
    traces = [traces[0], dataclasses.replace(traces[1], forced=True)]
    assert "**Cycle 2 starts**" in narrative.phase_markdown(traces[1], "start")
    line = narrative.status_markdown(10, traces, 1, "accept", "draft model")
    assert line.startswith("cycle **2** of 2") and "what-if cycle" in line
    assert "what-if" not in narrative.status_markdown(10, traces, 0, "accept", "draft model")
    for phase in CYCLE_PHASES:
        assert "finished" not in narrative.status_markdown(10, traces, 1, phase, "draft model")
