"""Pure figure functions in specviz.viz, on hand-built traces (no models) and one real tiny trace."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from sample_traces import demo_token_text, demo_traces

from specviz.trace import CYCLE_PHASES
from specviz.viz import acceptance, distributions, proposals, tokens
from specviz.viz.kv_html import kv_stage_html
from specviz.viz.style import show_token

VIZ = Path(__file__).resolve().parent.parent / "specviz" / "viz"


def test_viz_imports_neither_torch_nor_streamlit():
    for path in VIZ.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {
            (n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0
        }
        assert not names & {"torch", "streamlit", "transformers"}, (path.name, names)


def test_acceptance_figure_marks_u_and_untested():
    _, traces = demo_traces(accepted_counts=(2,), k=5)
    tr = traces[0]
    fig = acceptance.acceptance_figure(tr)
    bars = fig.data[0]
    assert list(bars.y) == [d.ratio for d in tr.drafts]
    assert list(bars.text) == ["accepted", "accepted", "rejected", "never tested", "never tested"]
    assert list(fig.data[1].y) == [d.u for d in tr.drafts if d.u is not None]
    untested = acceptance.acceptance_figure(tr, tested=False)
    assert len(untested.data) == 1  # u is not drawn before the acceptance phase


def test_acceptance_figure_greedy_has_no_u():
    _, traces = demo_traces(accepted_counts=(1,), k=3, temperature=0.0)
    fig = acceptance.acceptance_figure(traces[0])
    assert len(fig.data) == 1 and "greedy" in fig.layout.title.text


def test_proposals_and_distributions():
    _, traces = demo_traces(accepted_counts=(3, 5))
    rej, full = traces
    fig = proposals.proposals_figure(rej)
    assert len(fig.data[0].z[0]) == rej.k
    pq = distributions.pq_figure(rej, 4)
    assert {t.name for t in pq.data} == {"q4 (draft)", "p4 (target)"}
    res = distributions.residual_figure(rej)
    assert "no bonus" in res.layout.title.text
    assert distributions.bonus_figure(rej).layout.title.text.startswith("A draft was rejected")
    bonus = distributions.bonus_figure(full)
    assert "bonus token" in bonus.layout.title.text
    assert "No rejection" in distributions.residual_figure(full).layout.title.text


def test_pq_figure_always_shows_the_drafted_token():
    import dataclasses

    from specviz.trace import TokenProb

    _, traces = demo_traces(accepted_counts=(0,), k=2)
    tr = traces[0]
    crowd = tuple(TokenProb(1000 + i, 0.05, f"t{i}") for i in range(16))
    d = dataclasses.replace(
        tr.drafts[0], token_id=999, text="rare", draft_prob=0.001, target_prob=0.0001, draft_top=crowd, target_top=crowd
    )
    tr = dataclasses.replace(tr, drafts=(d, *tr.drafts[1:]))
    fig = distributions.pq_figure(tr, 1)
    assert any("rare" in x for x in fig.data[0].x)


def test_token_strip_reveals_phase_by_phase():
    prompt, traces = demo_traces(accepted_counts=(3,), k=5, prompt_len=6)
    kinds = lambda phase: [c.kind for c in tokens.strip_chips(prompt, traces, demo_token_text, 0, phase)]  # noqa: E731
    assert kinds("start") == ["prompt"] * 6
    assert kinds("draft") == ["prompt"] * 6 + ["pending"] * 5
    assert kinds("accept") == ["prompt"] * 6 + ["accepted"] * 3 + ["rejected", "untested"]
    assert kinds("resolve") == ["prompt"] * 6 + ["accepted"] * 3 + ["corrected", "rejected", "untested"]
    assert kinds("rollback") == ["prompt"] * 6 + ["accepted"] * 3 + ["corrected"]
    html = tokens.strip_html(tokens.strip_chips(prompt, traces, demo_token_text, 0, "rollback"))
    assert html.count("<span title=") == 10 and "corrected" in html


def test_show_token_makes_whitespace_visible():
    assert show_token(" the") == "␣the"
    assert show_token("\n") == "↵"
    assert show_token("") == "∅"
    assert show_token("x" * 40, 10).endswith("…")


def test_figures_on_a_real_tiny_trace():
    import specviz

    pair = specviz.build_tiny_pair(seed=0)
    dec = specviz.SpeculativeDecoder(pair, specviz.DecodeConfig(k=4, page_size=4, max_new_tokens=32))
    dec.start(pair.tokenizer.encode("hello world"))
    tr = dec.step()
    for phase in CYCLE_PHASES:
        assert kv_stage_html(tr.snapshot(phase), None, dec.token_text, trace=tr, phase=phase, proposer=tr.proposer)
    proposals.proposals_figure(tr).to_json()
    acceptance.acceptance_figure(tr).to_json()
    distributions.pq_figure(tr, 1).to_json()
    (distributions.residual_figure if tr.rejected_at else distributions.bonus_figure)(tr).to_json()  # serialisable


def test_proposals_show_a_draft_sampled_outside_the_top_list():
    import dataclasses

    _, traces = demo_traces(accepted_counts=(0,), k=2)
    tr = traces[0]
    d = dataclasses.replace(tr.drafts[0], token_id=999, text="rare", draft_prob=0.001)
    fig = proposals.proposals_figure(dataclasses.replace(tr, drafts=(d, *tr.drafts[1:])), top_n=4)
    assert list(fig.layout.yaxis.ticktext)[-1] == "other"
    assert "rare" in fig.data[0].text[4][0]
    assert (fig.data[1].x[0], fig.data[1].y[0]) == (0, 4)  # the outline marks it there


# ---- proposers (DESIGN §1b): real traces from the tiny pair --------------------------------------


@functools.cache
def _tiny_pair():
    import specviz

    return specviz.build_tiny_pair(seed=0)


def real_traces(proposer: str, prompt: str, cycles: int, **config):
    """(decoder, traces) of `cycles` real cycles of the tiny pair with `proposer`."""
    import specviz

    pair = _tiny_pair()
    cfg = specviz.DecodeConfig(proposer=proposer, page_size=4, max_new_tokens=64, **{"k": 3, **config})
    dec = specviz.SpeculativeDecoder(pair, cfg)
    dec.start(pair.tokenizer.encode(prompt))
    return dec, [dec.step() for _ in range(cycles)]


def plain_step(proposer: str):
    """A real cycle with no proposal: lookup on a prompt of distinct characters (nothing repeats),
    or a feature head on a one-token prompt (no target feature exists yet)."""
    dec, (tr,) = real_traces(proposer, "abcdefghij" if proposer == "lookup" else "a", 1)
    assert tr.k == 0 and tr.drafts == () and [e.kind for e in tr.emitted] == ["generated"]
    return dec, tr


@pytest.mark.parametrize("proposer", ["lookup", "feature"])
def test_a_cycle_without_proposal_renders_in_every_view(proposer):
    from specviz import narrative, stats
    from specviz.viz import statistics

    dec, tr = plain_step(proposer)
    prompt = dec.committed[: tr.context_len]
    for phase in CYCLE_PHASES:
        html = kv_stage_html(tr.snapshot(phase), None, dec.token_text, trace=tr, phase=phase, proposer=proposer)
        # the KV view's cycle panel says there was nothing to draft, from the draft phase on
        assert ("<h3 class='svkv-title'>This cycle</h3>" in html) == (phase != "start")
        chips = tokens.strip_chips(prompt, [tr], dec.token_text, 0, phase)
        assert "pending" not in {c.kind for c in chips}
        tokens.strip_html(chips)
        assert narrative.phase_markdown(tr, phase)
    assert [c.kind for c in tokens.strip_chips(prompt, [tr], dec.token_text, 0, "rollback")][-1] == "generated"
    assert "generated (no proposal)" in tokens.strip_html([])
    assert proposals.proposals_figure(tr).layout.title.text.startswith("Draft proposals: none this cycle")
    for tested in (False, True):
        assert acceptance.acceptance_figure(tr, tested).layout.title.text.startswith("Acceptance: nothing to test")
    assert distributions.pq_figure(tr, 1).layout.title.text.startswith("p vs q: no proposal")
    resolve = distributions.resolve_figure(tr)
    token = tr.emitted[0]
    assert f"token {token.text!r} generated from p1" in resolve.layout.title.text
    assert list(resolve.data[0].y) == [tp.prob for tp in tr.bonus_top]  # p_1, as recorded
    assert distributions.residual_figure(tr).layout.title.text.startswith("No rejection")
    st = stats.acceptance_stats([tr])
    assert (st.cycles, st.plain_cycles, st.tested, sum(st.accepted_hist)) == (1, 1, 0, 0)
    report = stats.measured_speedup([tr], baseline_ms_per_token=10.0)
    assert report.expected_tokens_per_cycle == 1.0  # a plain step commits exactly one token
    statistics.stats_figure(st, report).to_json()
    statistics.speedup_figure(report).to_json()
    assert stats.cycle_rows([tr])[0]["note"] == "no proposal: plain target step"


def test_lookup_one_hot_q_in_proposals_and_acceptance():
    dec, (tr,) = real_traces("lookup", "abcabcabcab", 1)
    assert tr.k == 3 and all(d.draft_prob == 1.0 and len(d.draft_top) == 1 for d in tr.drafts)
    fig = proposals.proposals_figure(tr)
    assert list(fig.layout.yaxis.ticktext) == ["#1"]  # one row: q is one-hot, nothing else to list
    assert "one-hot" in fig.layout.title.text
    acc = acceptance.acceptance_figure(tr)
    assert list(acc.data[0].y) == [d.target_prob for d in tr.drafts]  # min(1, p/1) = p
    assert "accept d_i iff u_i ≤ p_i(d_i)" in acc.layout.title.text
    assert "one-hot" in distributions.pq_figure(tr, 1).layout.title.text
    if tr.rejected_at and tr.temperature > 0:
        assert "without d" in distributions.residual_figure(tr).layout.title.text


def test_demo_traces_simulate_lookup_and_plain_steps():
    prompt, traces = demo_traces(accepted_counts=(None, 2, 4), k=4, proposer="lookup")
    plain, rej, full = traces
    assert plain.k == 0 and [e.kind for e in plain.emitted] == ["generated"]
    assert all(s.draft is None for t in traces for s in t.snapshots)
    assert all(d.draft_prob == 1.0 for d in rej.drafts) and full.bonus_token is not None
    for tr in traces:
        for phase in CYCLE_PHASES:
            html = kv_stage_html(tr.snapshot(phase), None, demo_token_text, trace=tr, phase=phase, proposer="lookup")
            assert html.count("<section class='svkv-cache'") == 1 and "Prompt lookup keeps no draft cache" in html
    with pytest.raises(ValueError):
        demo_traces(proposer="feature")
    with pytest.raises(ValueError):
        demo_traces(accepted_counts=(5,), k=4)  # more accepted than drafted
