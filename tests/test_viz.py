"""Pure figure functions in specviz.viz, on hand-built traces (no models) and one real tiny trace."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from specviz.trace import CYCLE_PHASES
from specviz.viz import acceptance, distributions, kv, proposals, tokens
from specviz.viz.sample import demo_token_text, demo_traces
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


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
@pytest.mark.parametrize("phase", CYCLE_PHASES)
def test_kv_figure_has_one_frame_per_phase_and_opens_on_phase(layout, phase):
    _, traces = demo_traces(layout=layout)
    fig = kv.kv_figure(traces[0], demo_token_text, phase)
    assert [f.name for f in fig.frames] == list(CYCLE_PHASES)
    assert fig.layout.sliders[0].active == CYCLE_PHASES.index(phase)
    assert fig.layout.updatemenus[0].buttons[0].method == "animate"
    # The initial data is the frame of `phase`.
    frame = next(f for f in fig.frames if f.name == phase)
    assert fig.data[0].customdata == frame.data[0].customdata


def _states(fig, frame_name: str, trace_index: int = 0) -> list[str]:
    """Slot states of one grid in one frame (the tiles trace carries them as customdata)."""
    frame = next(f for f in fig.frames if f.name == frame_name)
    return list(frame.data[trace_index].customdata)


def test_kv_figure_shows_provisional_append_and_rollback():
    _, traces = demo_traces(accepted_counts=(3,), k=5, prompt_len=10, page_size=4)
    fig = kv.kv_figure(traces[0], demo_token_text, "rollback")
    committed, provisional, stale = "committed", "provisional", "stale"
    # target: verify appends K+1 = 6 entries (positions 9..14): x_n's is committed (x_n is), the
    # K = 5 drafts' are provisional.
    assert _states(fig, "verify").count(provisional) == 5
    assert _states(fig, "verify").count(committed) == _states(fig, "start").count(committed) + 1
    assert _states(fig, "start").count(provisional) == 0
    # rollback: rejection at 4 drops d4, d5 (2 entries); nothing provisional remains
    after = _states(fig, "rollback")
    assert after.count(provisional) == 0 and after.count(committed) == 13
    assert after.count(stale) == 2  # positions 13, 14 stay in their (still used) block as stale slots
    # draft (heatmap = trace index 3): catch-up x_n + d1..d4 fed, d5 never fed -> 4 provisional
    assert _states(fig, "draft", 3).count(provisional) == 4


def test_kv_figure_block_table_tags_and_free_count():
    _, traces = demo_traces(accepted_counts=(0,), k=5, prompt_len=10, page_size=4)
    fig = kv.kv_figure(traces[0], demo_token_text, "rollback")
    verify = next(f for f in fig.frames if f.name == "verify")
    rollback = next(f for f in fig.frames if f.name == "rollback")
    tags_verify, tags_rollback = verify.data[2].text, rollback.data[2].text
    assert any(t.endswith("L3") for t in tags_verify)
    assert not any(t.endswith("L3") for t in tags_rollback)  # block freed back to the pool
    heading = lambda f: f.layout.annotations[0].text  # noqa: E731
    assert "free blocks" in heading(verify) and "free blocks" in heading(rollback)


def test_kv_keep_policy_keeps_blocks_reserved():
    _, traces = demo_traces(accepted_counts=(0,), k=5, prompt_len=10, page_size=4, policy="keep")
    fig = kv.kv_figure(traces[0], demo_token_text, "rollback")
    rollback = next(f for f in fig.frames if f.name == "rollback")
    assert any(t.endswith("L3") for t in rollback.data[2].text)


def test_prefill_figure_has_a_single_frame():
    _, traces = demo_traces()
    snap = traces[0].snapshot("start")
    fig = kv.kv_figure_from_frames([kv.prefill_frame(snap.target, snap.draft)], demo_token_text, "prefill")
    assert [f.name for f in fig.frames] == ["prefill"]
    assert not fig.layout.sliders


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
        fig = kv.kv_figure(tr, dec.token_text, phase)
        assert len(fig.frames) == len(CYCLE_PHASES)
    proposals.proposals_figure(tr)
    acceptance.acceptance_figure(tr)
    distributions.pq_figure(tr, 1)
    (distributions.residual_figure if tr.rejected_at else distributions.bonus_figure)(tr)
    fig.to_json()  # serialisable


def test_kv_figure_tweens_and_outlines_changes():
    _, traces = demo_traces(accepted_counts=(3,), k=5, prompt_len=10, page_size=4)
    fig = kv.kv_figure(traces[0], demo_token_text, "verify")
    # Only scatter traces: plotly.js can tween them (a heatmap would vanish mid-transition).
    assert {t.type for t in fig.data} == {"scatter"}
    assert fig.layout.transition.duration > 0
    verify = next(f for f in fig.frames if f.name == "verify")
    tiles = verify.data[0]
    outlined = [s for s, line in zip(tiles.customdata, tiles.marker.line.color, strict=True) if line == "#111827"]
    # the verify pass wrote x_n's K/V (committed) and the 5 drafts' (provisional)
    assert sorted(outlined) == ["committed"] + ["provisional"] * 5
    start = next(f for f in fig.frames if f.name == "start")
    assert "#111827" not in start.data[0].marker.line.color  # nothing changed before the cycle's first phase


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


def _annotations(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_lookup_kv_figure_has_no_draft_panel_and_says_so(layout):
    dec, (tr,) = real_traces("lookup", "abcabcabcab", 1, cache_layout=layout)
    assert tr.k == 3 and all(s.draft is None for s in tr.snapshots)
    for phase in CYCLE_PHASES:
        fig = kv.kv_figure(tr, dec.token_text, phase)
        spec = fig.to_dict()
        assert "xaxis2" not in spec["layout"]  # no second grid at all
        assert {t.get("xaxis") for t in spec["data"] if t.get("xaxis")} == {"x"}
        assert [f.name for f in fig.frames] == list(CYCLE_PHASES)
        assert all(list(f.traces) == [0, 1, 2] for f in fig.frames)  # frames animate the target only
        texts = _annotations(fig)
        assert any("Prompt lookup keeps no draft cache" in t for t in texts)
        assert not any("Draft model cache" in t or "Feature head cache" in t for t in texts)
        assert "prompt lookup: no cache" in texts[2]
    if layout == "contiguous":  # drawn alone, the buffer takes the width the proposer's panel would have had
        assert fig.layout.xaxis.domain[1] > kv.HALF
        assert len(next(f for f in fig.frames if f.name == "start").data[0].x) % kv.CONTIGUOUS_ROW_ALONE == 0
    # Before the first cycle: the prefill frame has no proposer snapshot either.
    prefill = kv.kv_figure_from_frames(
        [kv.prefill_frame(tr.snapshot("start").target, None)], dec.token_text, "prefill", proposer="lookup"
    )
    assert any("no draft cache" in t for t in _annotations(prefill)) and len(prefill.frames[0].data) == 3


def test_kv_panel_is_captioned_by_proposer():
    dec, (tr,) = real_traces("draft", "hello world", 1)
    assert _annotations(kv.kv_figure(tr, dec.token_text, "draft"))[1].startswith("<b>Draft model cache</b>")
    dec, (tr,) = real_traces("feature", "abcabcabcab", 1, k=4)
    fig = kv.kv_figure(tr, dec.token_text, "draft")
    heading = _annotations(fig)[1]
    assert "Feature head cache (1 layer: pairs of target feature + next token)" in heading
    head = tr.snapshot("draft").draft
    # d2..dK were fed the head's PREDICTED features: K-1 entries, drawn provisional.
    assert head.seq_len - head.num_committed == tr.k - 1 == 3
    assert f"({head.num_committed} from real features + 3 from predicted features)" in heading
    assert _states(fig, "draft", 3).count("provisional") == 3
    assert _states(fig, "rollback", 3).count("provisional") == 0
    hovers = next(f for f in fig.frames if f.name == "draft").data[3].hovertext
    assert any("the head's predicted feature" in h for h in hovers)
    assert any("the target's real feature" in h for h in hovers)


@pytest.mark.parametrize("proposer", ["lookup", "feature"])
def test_a_cycle_without_proposal_renders_in_every_view(proposer):
    from specviz import narrative, stats
    from specviz.viz import statistics

    dec, tr = plain_step(proposer)
    prompt = dec.committed[: tr.context_len]
    for phase in CYCLE_PHASES:
        kv.kv_figure(tr, dec.token_text, phase).to_json()
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
    prompt, traces = demo_traces(accepted_counts=(None, 2, 5), k=4, proposer="lookup")
    plain, rej, full = traces
    assert plain.k == 0 and [e.kind for e in plain.emitted] == ["generated"]
    assert all(s.draft is None for t in traces for s in t.snapshots)
    assert all(d.draft_prob == 1.0 for d in rej.drafts) and full.bonus_token is not None
    for tr in traces:
        for phase in CYCLE_PHASES:
            kv.kv_figure(tr, demo_token_text, phase)
    with pytest.raises(ValueError):
        demo_traces(proposer="feature")


def test_kv_panels_report_allocated_held_and_valid_memory():
    """Each cache's heading states its KV memory from the snapshot: allocated >= held >= valid,
    valid = positions ever read x bytes per position (issue 10: memory that fits the run)."""
    dec, (tr,) = real_traces("draft", "hello world", 1)
    snap = tr.snapshot("rollback")
    for cache in (snap.target, snap.draft):
        assert cache.bytes_per_slot > 0
        assert cache.allocated_bytes >= cache.held_bytes >= cache.valid_bytes == cache.seq_len * cache.bytes_per_slot
    texts = _annotations(kv.kv_figure(tr, dec.token_text, "rollback"))
    want = kv.memory_text(snap.target)
    assert want.startswith("KV ") and "allocated" in want and "held" in want and "valid" in want
    assert any(want in t for t in texts) and any(kv.memory_text(snap.draft) in t for t in texts)
