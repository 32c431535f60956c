"""Acceptance statistics, the Leviathan formulas, the narrative, and the exactness lab."""

from __future__ import annotations

import math

import pytest
from sample_traces import demo_traces

from specviz import narrative, stats
from specviz.lab import checkpoints_for, total_variation
from specviz.trace import CYCLE_PHASES
from specviz.viz.exactness import lab_figure
from specviz.viz.statistics import speedup_figure, stats_figure


def test_expected_tokens_per_cycle_formula():
    assert stats.expected_tokens_per_cycle(0.0, 5) == 1.0
    assert stats.expected_tokens_per_cycle(1.0, 5) == 6.0
    a, k = 0.8, 4
    assert stats.expected_tokens_per_cycle(a, k) == pytest.approx(sum(a**i for i in range(k + 1)))
    assert stats.expected_tokens_per_cycle(0.999999, 3) == pytest.approx(4.0, rel=1e-4)


def test_expected_speedup_formula():
    a, k, c = 0.7, 5, 0.1
    want = (1 - a ** (k + 1)) / ((1 - a) * (k * c + 1))
    assert stats.expected_speedup(a, k, c) == pytest.approx(want)


def test_acceptance_stats_from_traces():
    _, traces = demo_traces(accepted_counts=(3, 5, 0, 2), k=5)
    st = stats.acceptance_stats(traces)
    assert st.cycles == 4
    assert st.accepted == 10
    assert st.tested == 4 + 5 + 1 + 3  # each cycle tests up to and including its first rejection
    assert st.alpha == pytest.approx(10 / 13)
    assert st.accepted_hist == (1, 0, 1, 1, 0, 1)
    assert st.tokens == 4 + 6 + 1 + 3 and st.tokens_per_cycle == pytest.approx(14 / 4)
    assert st.tested_by_position[0] == 4 and st.accepted_by_position[0] == 3
    assert st.acceptance_by_position()[4] == 1.0


def test_forced_cycles_are_excluded():
    import dataclasses

    _, traces = demo_traces(accepted_counts=(3, 5), k=5)
    forced = [dataclasses.replace(traces[0], forced=True), traces[1]]
    st = stats.acceptance_stats(forced)
    assert st.cycles == 1 and st.forced_cycles == 1 and st.alpha == 1.0


def test_cost_ratio_and_measured_speedup():
    _, traces = demo_traces(accepted_counts=(3, 5), k=5)  # draft 40 ms (8/forward), verify 60 ms
    assert stats.cost_ratio(traces) == pytest.approx(8 / 60)
    rep = stats.measured_speedup(traces, baseline_ms_per_token=60.0)
    spec_ms = sum(stats.cycle_ms(t) for t in traces)
    assert rep.spec_ms_per_token == pytest.approx(spec_ms / 10)
    assert rep.measured_speedup == pytest.approx(60.0 / (spec_ms / 10))
    assert rep.theoretical_speedup == pytest.approx(stats.expected_speedup(rep.alpha, 5, 8 / 60))
    assert stats.measured_speedup(traces, None).measured_speedup is None
    stats_figure(stats.acceptance_stats(traces), rep)
    speedup_figure(rep)


def test_cycle_rows():
    _, traces = demo_traces(accepted_counts=(3, 5), k=5)
    rows = stats.cycle_rows(traces)
    assert [r["accepted"] for r in rows] == [3, 5]
    assert rows[0]["rejected at"] == "d4" and rows[1]["rejected at"] == "—"
    assert rows[0]["last token"] == "corrected" and rows[1]["last token"] == "bonus"
    assert rows[0]["committed"] == "".join(e.text for e in traces[0].emitted)


def test_cycle_rows_convert_to_arrow_as_they_are():
    """The statistics tab's history table: every column one Arrow type. A column mixing numbers and
    "—" made Streamlit log a traceback per table and convert the frame a second time."""
    import pandas as pd
    import pyarrow as pa

    _, traces = demo_traces(accepted_counts=(3, 5, 0), k=5)
    frame = pd.DataFrame(stats.cycle_rows(traces))
    pa.Table.from_pandas(frame)  # raises ArrowInvalid / ArrowTypeError on a mixed column
    assert list(frame["rejected at"]) == ["d4", "—", "d1"]


def test_empty_traces():
    st = stats.acceptance_stats([])
    assert st.cycles == 0 and st.alpha == 0.0 and st.tokens_per_cycle == 0.0
    assert stats.cost_ratio([]) is None


def test_total_variation_and_checkpoints():
    assert total_variation([5, 5], [0.5, 0.5]) == 0.0
    assert total_variation([10, 0], [0.5, 0.5]) == pytest.approx(0.5)
    cps = checkpoints_for(200)
    assert cps[0] == 1 and cps[-1] == 200 and cps == sorted(set(cps))


def test_narrative_states_the_corrected_facts():
    _, traces = demo_traces(accepted_counts=(3, 5), k=5, prompt_len=10)
    rej, full = traces
    texts = {p: narrative.phase_markdown(rej, p) for p in CYCLE_PHASES}
    assert "K+1 = 6 inputs" in texts["verify"]
    assert "No bonus token" in texts["resolve"]
    assert "j = **4** tokens (3 accepted + the corrected token)" in texts["resolve"]
    assert "never tested" in texts["accept"] and "3 of 5 accepted" in texts["accept"]
    assert "15 → **13**" in texts["rollback"]  # target: n+K -> n+j-1 with n = 10, K = 5, j = 4
    assert "never fed" in texts["draft"]
    full_resolve = narrative.phase_markdown(full, "resolve")
    assert "Bonus token" in full_resolve and "K+1 = **6** tokens" in full_resolve
    assert "one short of the target" in narrative.phase_markdown(full, "rollback")
    assert "No bonus" not in full_resolve


def test_misconceptions_cover_design_corrections():
    md = narrative.misconceptions_markdown()
    for needle in ("bonus", "K+1 inputs", "minus its newest token", "draft model has its own KV cache", "vLLM v1"):
        assert needle in md


def test_exactness_lab_on_tiny_pair():
    import specviz
    from specviz.lab import run_exactness_lab

    pair = specviz.build_tiny_pair(seed=0)
    ids = pair.tokenizer.encode("hello world")
    seen = []
    res = run_exactness_lab(
        pair, ids, specviz.DecodeConfig(k=4, temperature=1.0), 40, progress=lambda f, m: seen.append(f)
    )
    assert seen[-1] == 1.0 and len(seen) == 40
    assert sum(res.spec_counts) == 40 and sum(res.target_counts) == 40
    assert math.isclose(sum(res.exact), 1.0, rel_tol=1e-5)
    assert res.checkpoints[-1] == 40 and len(res.tv_spec) == len(res.checkpoints)
    # Loose sanity bound: with 40 samples over ~13 buckets TV is well below 0.5 for an exact sampler.
    assert res.tv_spec[-1] < 0.5 and res.tv_target[-1] < 0.5
    lab_figure(res)


# ---- proposers (DESIGN §1b): the narrative on real traces from the tiny pair -------------------


def _real(proposer: str, prompt: str, cycles: int = 1, **config):
    import specviz

    pair = specviz.build_tiny_pair(seed=0)
    cfg = specviz.DecodeConfig(proposer=proposer, page_size=4, **{"k": 4, **config})
    dec = specviz.SpeculativeDecoder(pair, cfg)
    dec.start(pair.tokenizer.encode(prompt))
    return [dec.step() for _ in range(cycles)]


def test_narrative_feature_head_drops_predicted_entries_even_when_accepted():
    # Force all four drafts through, so the predicted-feature entries belong to ACCEPTED drafts.
    forced = tuple((i, True) for i in range(1, 5))
    first, second = _real("feature", "hello world", 2, forced_outcomes=forced)
    assert first.num_accepted == 4 and [e.kind for e in first.emitted][-1] == "bonus"
    resolve, rollback = first.snapshot("resolve"), first.snapshot("rollback")
    lo, hi = resolve.draft.num_committed, resolve.draft.seq_len - 1  # the recorded predicted entries
    assert hi - lo + 1 == 3  # d2..d4 were fed predicted features (d4's entry is never made)
    text = narrative.phase_markdown(first, "rollback")
    assert f"The feature head's cache goes {resolve.draft.seq_len} → **{rollback.draft.seq_len}**" in text
    assert f"Entries {lo}–{hi} were built from the head's own **predicted** features and are dropped" in text
    assert "**even though** d1, d2, d3 were accepted" in text
    lag = rollback.target.seq_len - rollback.draft.seq_len
    assert lag == len(first.emitted) == 5  # the head lags by the tokens this cycle committed
    assert f"lags the target cache by **{lag}** entries (this cycle committed 5 token(s))" in text
    draft = narrative.phase_markdown(first, "draft")
    assert "**real** features" in draft and f"entries {lo}–{hi} rest on a guess" in draft
    # The next cycle catches up on those 5 pairs from real features, recorded as its catch-up.
    assert len(second.catch_up) == 5
    assert "fed 5 pair(s) built from the target's **real** features" in narrative.phase_markdown(second, "draft")


def test_narrative_feature_head_after_a_rejection():
    (tr,) = _real("feature", "abcabcabcab", temperature=0.0)
    assert tr.rejected_at == 1  # an untrained head: the target disagrees at once
    resolve = tr.snapshot("resolve").draft
    text = narrative.phase_markdown(tr, "rollback")
    assert f"Entries {resolve.num_committed}–{resolve.seq_len - 1} were built from the head's own" in text
    assert "even though" not in text  # no accepted draft lost an entry
    assert "The draft cache" not in text and "one short of the target" not in text


def test_narrative_prompt_lookup():
    (tr,) = _real("lookup", "abcabcabcab", k=3)
    assert tr.k == 3 and tr.proposer_note
    draft = narrative.phase_markdown(tr, "draft")
    assert tr.proposer_note[1:] in draft and "**one-hot**" in draft and "no cache is written" in draft
    assert "Prompt lookup keeps **no cache**" in narrative.phase_markdown(tr, "start")
    assert "u_i ≤ p_i(d_i)" in narrative.phase_markdown(tr, "accept")
    assert "Prompt lookup keeps no cache: only the target rolls back." in narrative.phase_markdown(tr, "rollback")
    if tr.rejected_at and tr.temperature > 0:
        assert f"p_{tr.rejected_at} with d{tr.rejected_at} removed" in narrative.phase_markdown(tr, "resolve")
    pre = narrative.prefill_markdown(11, 10, None, "lookup")
    assert "keeps **no cache**" in pre and "draft cache" not in pre


def test_narrative_plain_target_step():
    (tr,) = _real("lookup", "abcdefghij")  # nothing repeats: no proposal
    assert tr.k == 0
    texts = {p: narrative.phase_markdown(tr, p) for p in CYCLE_PHASES}
    assert "No proposal this cycle" in texts["draft"] and "No earlier occurrence" in texts["draft"]
    before, after = tr.snapshot("draft").target.seq_len, tr.snapshot("verify").target.seq_len
    assert "ONE forward pass over x_n alone" in texts["verify"] and f"{before} → **{after}**" in texts["verify"]
    assert "Nothing to test" in texts["accept"] and "Result:" not in texts["accept"]
    g = tr.emitted[0]
    assert "One generated token" in texts["resolve"] and f"placed at position {g.position}" in texts["resolve"]
    assert "Bonus token" not in texts["resolve"] and "Corrected token" not in texts["resolve"]
    assert "removes nothing" in texts["rollback"] and "K−j+1" not in texts["rollback"]


def test_misconceptions_cover_proposers():
    md = narrative.misconceptions_markdown()
    for needle in (
        "reads the target's hidden states",
        "**always rolled back**",
        "Exactness holds with **any** proposer, even an untrained head",
        "trimmed vocabulary",
        "max(0, p − q) = p",
    ):
        assert needle in md


def test_stats_with_plain_steps_mix_the_theory_by_share():
    _, traces = demo_traces(accepted_counts=(None, 2, None, 4), k=4, proposer="lookup")
    st = stats.acceptance_stats(traces)
    assert st.plain_cycles == 2 and st.cycles == 4
    assert st.accepted_hist == (0, 0, 1, 0, 1)  # plain steps are not "0 accepted"
    assert st.tested == 3 + 4 and st.accepted == 6
    rep = stats.measured_speedup(traces, None)
    want = 0.5 * stats.expected_tokens_per_cycle(6 / 7, 4) + 0.5
    assert rep.expected_tokens_per_cycle == pytest.approx(want)


def test_a_cycles_time_is_its_own_total_not_a_sum_of_every_key():
    """A trace carries its total (draft to rollback); an older one's is the sum of the decoding phases
    only: the invariant check is not decoding, and a key added later must not be counted twice."""
    import dataclasses

    from specviz import DecodeConfig, SpeculativeDecoder, build_tiny_pair

    pair = build_tiny_pair(seed=0)
    dec = SpeculativeDecoder(pair, DecodeConfig(k=3, seed=2, check_invariant=True))
    dec.start(pair.tokenizer.encode("the quick brown fox"))
    trace = dec.step()
    phases = ("draft", "verify", "accept", "resolve", "rollback")
    assert "invariant_check" in trace.timings_ms and trace.total_ms > 0
    assert trace.total_ms == pytest.approx(sum(trace.timings_ms[p] for p in phases), rel=1e-9)  # one clock
    assert stats.cycle_ms(trace) == trace.total_ms
    older = dataclasses.replace(trace, total_ms=None, timings_ms={**trace.timings_ms, "draft_total": 99.0})
    assert stats.cycle_ms(older) == pytest.approx(sum(trace.timings_ms[p] for p in phases))
