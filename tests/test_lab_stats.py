"""Acceptance statistics, the Leviathan formulas, the narrative, and the exactness lab."""

from __future__ import annotations

import math

import pytest

from specviz import narrative, stats
from specviz.lab import checkpoints_for, total_variation
from specviz.trace import CYCLE_PHASES
from specviz.viz.exactness import lab_figure
from specviz.viz.sample import demo_traces
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
    assert rows[0]["rejected at"] == 4 and rows[1]["rejected at"] == "—"
    assert rows[0]["last token"] == "corrected" and rows[1]["last token"] == "bonus"
    assert rows[0]["committed"] == "".join(e.text for e in traces[0].emitted)


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
    assert "No bonus token" in texts["resolve"] and "j = 4 token(s)" in texts["resolve"]
    assert "never tested" in texts["accept"] and "3 of 5 accepted" in texts["accept"]
    assert "15 → **13**" in texts["rollback"]  # target: n+K -> n+j-1 with n = 10, K = 5, j = 4
    assert "never fed" in texts["draft"]
    full_resolve = narrative.phase_markdown(full, "resolve")
    assert "Bonus token" in full_resolve and "K+1 = 6" in full_resolve
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
