"""The machine's cost law (specviz.costlaw) and k="auto" in the engine (docs/design.md §1, "How many drafts").

The law's choices are tested with cost curves passed in as data: a steep v(N) with low acceptance
must give a plain step, a flat one with high acceptance long chains. The engine under auto stays
exact: greedy output equals the target's greedy output, the invariant holds after every cycle
(plain steps included), and sampled tokens follow the target's law (chi-square).
"""

from __future__ import annotations

import collections
import json

import pytest
import torch
from cuda_checks import EXACT_PROMPT, VOCAB, chi_square, exact_joint
from engine_helpers import LAYOUT_CASES, assert_invariant, make_pair

from specviz import DecodeConfig, SpeculativeDecoder, costlaw
from specviz.costlaw import CostLaw
from specviz.errors import ConfigError
from specviz.trace import CycleTrace

PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]
NS = (1, 2, 3, 4, 5, 6, 7, 8, 9)


def law(slope: float, c: float = 0.0,
        proposers=("draft", "feature", "lookup", "retrieval", "feature+lookup")) -> CostLaw:
    """A cost curve given as data: v(N) = 1 + slope * (N - 1), every proposer costing c per draft."""
    return CostLaw(ns=NS, verify=tuple(1 + slope * (n - 1) for n in NS), step_ms=10.0,
                   draft_cost=dict.fromkeys(proposers, c), machine="test")


STEEP, FLAT = law(0.8, 0.1), law(0.0, 0.0)  # steep: one draft pays only above 96 % acceptance


# --------------------------------------------------------------------------- the law as math


def test_expected_tokens_and_cost():
    assert costlaw.expected_tokens([0.5, 0.5, 0.5], 0) == 1.0
    assert costlaw.expected_tokens([0.5, 0.5, 0.5], 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert costlaw.cycle_cost(STEEP, "draft", 0) == 1.0  # a plain step
    assert costlaw.cycle_cost(STEEP, "draft", 2) == pytest.approx(2 * 0.1 + 1 + 0.8 * 2)


def test_steep_curve_and_low_acceptance_pick_a_plain_step():
    choice = costlaw.choose(STEEP, "draft", [0.3] * 8, 8)
    assert choice.k == 0 and choice.expected_speedup == 1.0
    assert "plain step" in choice.reason


def test_cheap_verify_and_high_acceptance_pick_a_long_chain():
    choice = costlaw.choose(FLAT, "lookup", [0.9] * 8, 8)
    assert choice.k == 8 and choice.expected_speedup > 4
    assert costlaw.choose(FLAT, "lookup", [0.9] * 8, 3).k == 3  # never past the cap


def test_the_margin_keeps_a_marginal_gain_a_plain_step():
    barely = law(0.0, 0.0)  # one draft at acceptance 0.02: 1.02 tokens for 1 step
    assert costlaw.choose(barely, "lookup", [0.02] * 8, 8).k == 0
    assert costlaw.choose(barely, "lookup", [0.2] * 8, 8).k > 0


def test_break_even_rises_with_the_cost():
    cheap, dear = law(0.1), law(0.5)
    assert 0 < costlaw.break_even(cheap, "draft", 1) < costlaw.break_even(dear, "draft", 1) <= 1
    k1 = costlaw.break_even(cheap, "draft", 1)
    assert costlaw.expected_tokens([k1], 1) == pytest.approx(costlaw.cycle_cost(cheap, "draft", 1), abs=1e-6)
    assert costlaw.break_even(law(2.0), "draft", 1) == 1.0  # a verify dearer than 2 steps never pays


def test_v_interpolates_and_extrapolates():
    sparse = CostLaw(ns=(1, 3, 5), verify=(1.0, 1.4, 1.8), step_ms=1.0)
    assert sparse.v(2) == pytest.approx(1.2)
    assert sparse.v(7) == pytest.approx(2.2)
    assert CostLaw.from_dict(json.loads(json.dumps(sparse.to_dict()))) == sparse


def test_monotone_fit_removes_dips():
    assert costlaw.monotone([1.0, 1.4, 1.2, 1.5]) == pytest.approx([1.0, 1.3, 1.3, 1.5])
    assert costlaw.monotone([1.0, 1.1]) == [1.0, 1.1]


def test_acceptance_counts_from_origins():
    # cycles: 2 accepted + corrected (depth 3 rejected); plain step; 1 accepted + bonus; corrected at depth 1
    origins = ["accepted", "accepted", "corrected", "generated", "accepted", "bonus", "corrected"]
    tested, accepted = costlaw.acceptance_counts(origins)
    assert tested == [3, 1, 1] and accepted == [2, 1, 0]
    est = costlaw.estimate("draft", tested, accepted, 4)
    prior = costlaw.PRIORS["draft"]
    assert est[0] == pytest.approx((2 + costlaw.PRIOR_WEIGHT * prior) / (3 + costlaw.PRIOR_WEIGHT))
    assert est[3] == pytest.approx(prior)  # never tested: the prior


def test_tree_budget_follows_the_curve():
    assert costlaw.choose_tree(STEEP, "feature", [0.3] * 8, 4, 32).k == 0
    wide = costlaw.choose_tree(FLAT, "feature", [0.5] * 8, 4, 32)
    assert wide.k == 32 and "tree" in wide.reason
    assert costlaw.choose_tree(FLAT, "feature", [0.5] * 8, 4, 0).k == 0


def test_config_accepts_auto():
    cfg = DecodeConfig(k="auto")
    assert cfg.auto and cfg.max_k == costlaw.AUTO_MAX_K
    assert not DecodeConfig(k=3).auto and DecodeConfig(k=3).max_k == 3
    with pytest.raises(ConfigError, match="auto"):
        DecodeConfig(k="many")


# --------------------------------------------------------------------------- auto in the engine


@pytest.fixture(scope="module")
def pair():
    return make_pair("llama", vocab_size=64, noise=0.2)


def run(pair, cfg: DecodeConfig, cost_law: CostLaw) -> tuple[SpeculativeDecoder, list[CycleTrace]]:
    dec = SpeculativeDecoder(pair, cfg, cost_law=cost_law)
    dec.start(PROMPT)
    traces = []
    while not dec.finished:
        traces.append(dec.step())
        assert_invariant(dec)
    return dec, traces


@pytest.mark.parametrize("proposer", ["draft", "feature", "lookup", "retrieval", "feature+lookup"])
@pytest.mark.parametrize("cost_law", [STEEP, FLAT, law(0.25, 0.05)], ids=["steep", "flat", "mid"])
def test_auto_greedy_equals_target_greedy(pair, proposer, cost_law):
    new = 20
    reference = pair.target.generate(torch.tensor([PROMPT]), do_sample=False, max_new_tokens=new,
                                     min_new_tokens=new)[0].tolist()
    cfg = DecodeConfig(k="auto", proposer=proposer, temperature=0, max_new_tokens=new, cache_layout="paged",
                       page_size=3)
    dec, traces = run(pair, cfg, cost_law)
    assert dec.committed == reference
    assert all(t.auto is not None for t in traces)
    for t in traces:
        assert t.k <= max(t.auto.k, 0)  # the proposer may propose fewer than asked, never more
        if t.auto.k == 0:  # a plain target step: one generated token, nothing tested
            assert t.k == 0 and [e.kind for e in t.emitted] == ["generated"] and t.proposer_note == t.auto.reason
    if cost_law is STEEP:
        assert all(t.auto.k == 0 for t in traces)
    if cost_law is FLAT:  # every draft pays: a plain step only where prompt lookup has nothing to copy
        assert all(t.auto.k > 0 or (proposer == "lookup" and "nothing to copy" in t.auto.reason)
                   for t in traces[:-1])


@pytest.mark.parametrize(("layout", "page_size", "policy"), LAYOUT_CASES[:3])
def test_auto_mixes_plain_steps_and_drafts_with_the_invariant(pair, layout, page_size, policy):
    """A curve where one rejection tips the law to plain steps and an acceptance back to drafts."""
    middling = law(0.3, 0.0)
    cfg = DecodeConfig(k="auto", proposer="draft", temperature=1.0, max_new_tokens=30, cache_layout=layout,
                       page_size=page_size, free_policy=policy, seed=5)
    _, traces = run(pair, cfg, middling)
    chosen = {t.auto.k for t in traces}
    assert 0 in chosen and chosen - {0}, chosen
    back = CycleTrace.from_dict(json.loads(json.dumps(traces[0].to_dict())))
    assert back == traces[0] and back.auto == traces[0].auto


def test_auto_tree_picks_a_budget(pair):
    cfg = DecodeConfig(k="auto", proposer="feature", tree_width=3, tree_nodes=16, temperature=0, max_new_tokens=12)
    _, traces = run(pair, cfg, FLAT)
    assert traces[0].auto.k == 16 and traces[0].tree is not None and traces[0].tree.budget == 16
    _, plain = run(pair, cfg, STEEP)
    assert all(t.auto.k == 0 and t.k == 0 for t in plain)


def test_auto_samples_match_the_target_distribution():
    """Chi-square at T = 1 over the first two tokens, with a law under which the first cycle
    drafts and a rejection makes the next a plain step: both kinds of cycle sample p exactly."""
    pair = make_pair("llama", vocab_size=VOCAB, noise=1.0, seed=3)
    cfg = DecodeConfig(k="auto", proposer="draft", temperature=1.0, instrument=False, max_new_tokens=16)
    middling = law(0.38, 0.0)  # one draft pays on the prior's doubt (a_1 <= 0.47), not after a rejection (<= 0.38)
    expected = exact_joint(pair.target, cfg)
    counts: collections.Counter = collections.Counter()
    plain = drafted = 0
    runs = 2000
    for seed in range(runs):
        dec = SpeculativeDecoder(pair, cfg.replace(seed=seed), cost_law=middling)
        dec.start(EXACT_PROMPT)
        while len(dec.committed) < len(EXACT_PROMPT) + 2:
            tr = dec.step()
            plain, drafted = plain + (tr.auto.k == 0), drafted + (tr.auto.k > 0)
        counts[tuple(dec.committed[len(EXACT_PROMPT):len(EXACT_PROMPT) + 2])] += 1
    assert plain >= 100 and drafted >= 100, (plain, drafted)
    assert chi_square(counts, expected, runs)[1] > 0.01


def test_forks_decide_alike(pair):
    """The choice reads the run's own history (its committed tokens' origins), so a fork, like a
    parked decoder rebuilt from those tokens, makes the same choice and the same cycle."""
    cfg = DecodeConfig(k="auto", proposer="draft", temperature=1.0, max_new_tokens=24, seed=2)
    dec = SpeculativeDecoder(pair, cfg, cost_law=law(0.3))
    dec.start(PROMPT)
    for _ in range(3):
        dec.step()
    a, b = dec.fork(), dec.fork()
    first, second = a.step(), b.step()
    assert first.auto == second.auto and first.emitted == second.emitted


def test_law_for_measures_once_and_caches_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    small = make_pair("gpt2", vocab_size=64)
    measured = costlaw.law_for(small)
    assert measured.ns[0] == 1 and measured.verify[0] == 1.0 and measured.step_ms > 0
    assert list(measured.verify) == sorted(measured.verify)  # fitted non-decreasing
    assert set(measured.draft_cost) >= {"draft", "feature", "lookup", "retrieval"}
    assert costlaw.law_for(small) is measured  # the same loaded model: no second measurement
    files = list((tmp_path / "costlaw").glob("*.json"))
    assert len(files) == 1
    again = make_pair("gpt2", vocab_size=64)  # a fresh load of the same shapes reads the file
    assert costlaw.law_for(again) == measured


# --------------------------------------------------------------------------- on screen


def test_the_app_runs_auto_and_draws_the_law(tmp_path, monkeypatch):
    """Auto in the sidebar: each cycle records the law's choice, a plain step says why, and the
    statistics tab draws this machine's law and says in one sentence which K it picks."""
    from test_app import click, open_app, shown

    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path))
    at = open_app(tab="stats", k_mode="auto")
    assert at.radio(key="k_mode").value == "auto" and at.slider(key="k").disabled
    click(at, "next_cycle", 2)
    run = shown(at)
    assert run.dec.config.k == "auto" and all(t.auto is not None for t in run.traces)
    shown_text = " ".join(m.value for m in at.markdown)
    assert "**The cost law** — this machine's" in shown_text and "The law picks" in shown_text
    at.radio(key="k_mode").set_value("fixed").run()  # the lecturer fixes K: live, history kept
    click(at, "next_cycle")
    assert shown(at).dec.config.k == at.slider(key="k").value and shown(at).traces[-1].auto is None


def test_a_plain_step_chosen_by_auto_says_why(pair):
    from specviz.narrative import phase_markdown

    _, traces = run(pair, DecodeConfig(k="auto", temperature=0, max_new_tokens=4), STEEP)
    text = phase_markdown(traces[0], "draft")
    assert "Auto chose a plain step" in text and "pays only if accepted over" in text
    assert "chose **a plain step**" in phase_markdown(traces[0], "start")


def test_a_run_file_carries_the_recording_machines_law():
    """A replay elsewhere draws the law of the machine that recorded the run; older files have none."""
    import dataclasses

    from test_runfile import a_record

    from specviz.errors import RunFileError
    from specviz.runfile import load_run

    record = dataclasses.replace(a_record(), cost_law=law(0.25, 0.1))
    again = load_run(record.to_json())
    assert again.cost_law == record.cost_law and again == record
    old = json.loads(record.to_json())
    del old["cost_law"]
    assert load_run(json.dumps(old)).cost_law is None
    old["cost_law"] = {**record.cost_law.to_dict(), "ns": [2, 1, 3, 4, 5, 6, 7, 8, 9]}
    with pytest.raises(RunFileError, match="cost_law"):
        load_run(json.dumps(old))


# --------------------------------------------------------------------------- keyed proposers: per match length


def test_a_keyed_proposers_cycles_are_counted_by_match_length():
    assert costlaw.match_class("lookup", 0) is None and costlaw.match_class("draft", 3) is None
    assert [costlaw.match_class("lookup", n) for n in (1, 2, 3, 7)] == [1, 2, 3, 3]
    origins = ["accepted", "accepted", "corrected", "generated", "accepted", "bonus"]
    classes = [3, 3, 3, None, 1, 1]
    assert costlaw.acceptance_counts(costlaw.class_origins(origins, classes, 3)) == ([1, 1, 1], [1, 1, 0])
    # Class 1: one draft accepted, then the bonus.
    assert costlaw.acceptance_counts(costlaw.class_origins(origins, classes, 1)) == ([1], [1])
    # The prior follows the class: a 3-token match is trusted more than a 1-token one.
    assert costlaw.estimate("lookup", [], [], 2, 3)[0] > costlaw.estimate("lookup", [], [], 2, 1)[0]


def test_auto_trusts_a_long_match_and_steps_plain_after_a_short_one(pair):
    middling = law(0.3, 0.0)  # one draft pays above 30 % acceptance, eight above ~75 %
    cfg = DecodeConfig(k="auto", proposer="lookup", temperature=0, max_new_tokens=12)
    long_match = SpeculativeDecoder(pair, cfg, cost_law=middling)
    long_match.start([5, 6, 7, 8, 9, 5, 6, 7])  # [5, 6, 7] occurred before: 3 tokens to copy from
    first = long_match.step()
    assert first.auto.k > 0 and first.auto.reason.startswith("after a 3 or more-token match"), first.auto
    short_match = SpeculativeDecoder(pair, cfg, cost_law=middling)
    short_match.start([9, 1, 2, 3, 4, 5, 6, 7, 8, 9])  # only the last token occurred before
    first = short_match.step()
    assert first.auto.k == 0 and first.auto.reason.startswith("after a 1-token match: plain step"), first.auto
    assert first.k == 0 and [e.kind for e in first.emitted] == ["generated"]


def test_a_parked_lookup_run_keeps_its_match_classes_and_decides_alike(pair, monkeypatch):
    from specviz.parking import park, resume

    middling = law(0.3, 0.0)
    monkeypatch.setattr(costlaw, "law_for", lambda *_: middling)  # the resumed decoder's law: the same data
    cfg = DecodeConfig(k="auto", proposer="lookup", temperature=1.0, max_new_tokens=40, seed=3)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 1, 5, 6]

    def decoder(cycles: int) -> tuple[SpeculativeDecoder, list[CycleTrace]]:
        dec = SpeculativeDecoder(pair, cfg, cost_law=middling)
        dec.start(prompt)
        return dec, [dec.step() for _ in range(cycles) if not dec.finished]

    straight, straight_traces = decoder(12)
    dec, _ = decoder(5)
    classes = dec._require().match_classes
    assert any(c is not None for c in classes), "no cycle was keyed on a match"
    back = resume(pair, park(dec))
    assert back._require().match_classes == classes
    later = [back.step() for _ in range(7) if not back.finished]
    assert back.committed == straight.committed
    assert [t.auto for t in later] == [t.auto for t in straight_traces[5 : 5 + len(later)]]


def test_the_merged_proposer_copies_after_a_long_match_and_lets_the_head_draft_elsewhere(pair):
    """feature+lookup is keyed: class 0 (nothing to copy) drafts with the feature head at the head's
    cost, classes 2 and 3+ copy at lookup's (none); a 1-token match is the head's, not a copy."""
    assert [costlaw.match_class("feature+lookup", n) for n in (0, 2, 3, 9)] == [0, 2, 3, 3]
    assert costlaw.payer("feature+lookup", 0) == "feature+lookup" and costlaw.payer("feature+lookup", 3) == "lookup"
    assert costlaw.payer("feature", None) == "feature"
    dear_head = law(0.3, 0.5)  # every draft costs half a step, except a copy (lookup costs nothing)
    dear_head = CostLaw(ns=dear_head.ns, verify=dear_head.verify, step_ms=10.0, machine="test",
                        draft_cost={"feature": 0.5, "feature+lookup": 0.5, "lookup": 0.0})
    cfg = DecodeConfig(k="auto", proposer="feature+lookup", temperature=0, max_new_tokens=12)
    copying = SpeculativeDecoder(pair, cfg, cost_law=dear_head)
    copying.start([5, 6, 7, 8, 9, 5, 6, 7])  # [5, 6, 7] occurred before
    first = copying.step()
    assert first.auto.k > 0 and first.auto.reason.startswith("after a 3 or more-token match"), first.auto
    assert {d.source for d in first.drafts} == {"prompt lookup"} and "c = 0.000" in first.auto.reason
    guessing = SpeculativeDecoder(pair, cfg, cost_law=dear_head)
    guessing.start([9, 1, 2, 3, 4, 5, 6, 7, 8, 9])  # only the last token occurred before: no copy
    first = guessing.step()
    assert first.auto.reason.startswith("nothing to copy, the feature head drafts: plain step"), first.auto
    cheap_head = SpeculativeDecoder(pair, cfg, cost_law=FLAT)
    cheap_head.start([9, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    first = cheap_head.step()
    assert first.auto.k > 0 and {d.source for d in first.drafts} == {"feature head"}, first.auto
    assert cheap_head._require().match_classes[-1] == 0


def test_two_unlucky_cycles_do_not_end_the_drafting_but_firm_evidence_does():
    """Plain steps test nothing, so a decision on the posterior mean alone would stop drafting for
    good after two early rejections; auto decides on the mean plus DOUBT standard deviations."""
    here = law(0.25, 0.065)  # v(2) = 1.25: one draft pays above ~35 % acceptance
    unlucky = costlaw.estimate("feature", [2], [0], 4)
    assert costlaw.choose(here, "feature", unlucky, 4).k == 0  # the mean alone: plain from now on
    doubted = costlaw.optimistic(unlucky, [2])
    assert doubted[0] > unlucky[0] and doubted[1] > unlucky[1]  # untested depths keep the prior's doubt
    choice = costlaw.choose(here, "feature", doubted, 4, seen=unlucky[0])
    assert choice.k > 0 and f"{unlucky[0]:.2f} seen so far" in choice.reason
    firm = costlaw.estimate("feature", [12], [1], 4)
    plain = costlaw.choose(here, "feature", costlaw.optimistic(firm, [12]), 4, seen=firm[0])
    assert plain.k == 0 and "(at most" in plain.reason
    assert costlaw.optimistic([1.0, 0.0], [50, 50]) == (1.0, 0.0)  # certainty has no doubt
