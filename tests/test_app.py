"""The Streamlit app under `streamlit.testing.v1.AppTest`, on the tiny random pair (fast).

Every control and button is exercised, every view is checked to be present (by inspecting the
plotly JSON the app sends: the KV figure carries one frame per phase), history navigation must
replay recorded traces without recomputing, the what-if scenario must give exactly 3 accepted and
a rejection at 4, errors must be shown with the app still usable, and two sessions must not share
a decoder. One test (marked slow) opens the real default pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.trace import CYCLE_PHASES

APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 120


def open_app(pair: str = "tiny", **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["pair_kind"] = pair
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    assert_clean(at)
    return at


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def sess(at: AppTest):
    return at.session_state["_holder"].sess


def click(at: AppTest, key: str, times: int = 1) -> AppTest:
    for _ in range(times):
        at.button(key=key).click().run()
        assert_clean(at)
    return at


def kv_spec(at: AppTest) -> dict:
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        if any("Target cache" in a.get("text", "") for a in spec["layout"].get("annotations", [])):
            return spec
    raise AssertionError("no KV-cache figure on the page")


def phase_shown(at: AppTest) -> tuple[int | None, str]:
    s = sess(at)
    from app import view_of  # importing app.py runs nothing: main() is guarded

    return view_of(s.view, s)


# ------------------------------------------------------------------------------------------------


def test_opens_after_prefill_with_kv_view():
    at = open_app()
    s = sess(at)
    assert s.traces == () and s.view == 0
    spec = kv_spec(at)
    assert [f["name"] for f in spec.get("frames", [])] == ["prefill"]
    assert {b.key for b in at.button} >= {"next_phase", "next_cycle", "back", "play", "reset", "scenario"}
    assert any("Prefill" in m.value for m in at.markdown)


def test_next_phase_walks_one_cycle_and_kv_figure_has_a_frame_per_phase():
    at = open_app()
    shown = []
    for _ in range(5):
        click(at, "next_phase")
        shown.append(sess(at).view)
        spec = kv_spec(at)
        assert [f["name"] for f in spec["frames"]] == list(CYCLE_PHASES)
    assert shown == [1, 2, 3, 4, 5]
    assert len(sess(at).traces) == 1
    # The chart opens on the phase being shown (the slider's active step).
    assert kv_spec(at)["layout"]["sliders"][0]["active"] == CYCLE_PHASES.index("rollback")
    click(at, "next_phase")  # the next click computes the next cycle and shows its draft phase
    assert len(sess(at).traces) == 2 and sess(at).view == 6


def test_every_view_is_present_at_resolve():
    at = open_app()
    click(at, "next_phase", 4)  # draft, verify, accept, resolve
    titles = [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]
    assert any(t.startswith("Draft proposals") for t in titles)
    assert any(t.startswith("Acceptance tests") or t.startswith("Acceptance (greedy") for t in titles)
    assert any(" vs q" in t for t in titles)
    assert any(t.startswith("Rejection at") or t.startswith("All ") for t in titles)
    assert len(at.get("tabs")) == 4
    assert any("Corrected token" in m.value or "Bonus token" in m.value for m in at.markdown)
    # The token strip (HTML) is there, with its legend.
    assert any("accepted draft" in h.proto.body for h in at.get("html"))


def test_acceptance_bars_mark_untested_positions():
    at = open_app()
    for _ in range(6):  # find a cycle with a rejection before the last position
        click(at, "next_cycle")
        tr = sess(at).traces[-1]
        if tr.rejected_at is not None and tr.rejected_at < tr.k:
            break
    else:
        pytest.skip("no early rejection in six cycles")
    spec = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "").startswith("Acceptance")
    )
    labels = spec["data"][0]["text"]
    assert labels[tr.rejected_at - 1].startswith("rejected")
    assert all(lab == "never tested" for lab in labels[tr.rejected_at :])


def test_next_cycle_back_and_history_replay_without_recomputing():
    at = open_app()
    click(at, "next_cycle", 2)
    s = sess(at)
    assert len(s.traces) == 2 and s.view == 10 and s.revealed == 10
    first = s.traces
    click(at, "back")
    assert sess(at).view == 9
    at.select_slider(key="history").set_value(3).run()
    assert_clean(at)
    s = sess(at)
    assert s.view == 3 and phase_shown(at) == (0, "accept")
    assert s.traces is first or all(a is b for a, b in zip(s.traces, first, strict=True))
    spec = kv_spec(at)
    assert spec["layout"]["sliders"][0]["active"] == CYCLE_PHASES.index("accept")
    click(at, "next_phase")  # moves through history, no new cycle
    assert sess(at).view == 4 and len(sess(at).traces) == 2


def test_next_cycle_mid_cycle_completes_it():
    at = open_app()
    click(at, "next_phase", 2)
    click(at, "next_cycle")
    s = sess(at)
    assert len(s.traces) == 1 and s.view == 5


def test_play_advances_and_pause_stops():
    at = open_app()
    click(at, "play")
    assert at.session_state["_holder"].playing is True and sess(at).view == 1
    assert any(b.label == "Pause" for b in at.button)
    click(at, "play")
    assert at.session_state["_holder"].playing is False


def test_reset_restarts_from_the_prompt():
    at = open_app()
    click(at, "next_cycle", 2)
    click(at, "reset")  # with recorded cycles, Reset asks first
    click(at, "reset_confirm")
    s = sess(at)
    assert s.traces == () and s.view == 0
    assert any("Reset" in i.value for i in at.info)


def test_live_sampling_changes_keep_history():
    at = open_app()
    click(at, "next_cycle")
    at.slider(key="k").set_value(3).run()
    at.slider(key="temperature").set_value(0.0).run()
    at.number_input(key="top_k").set_value(20).run()
    at.number_input(key="top_p").set_value(0.9).run()
    assert_clean(at)
    assert len(sess(at).traces) == 1  # history kept
    click(at, "next_cycle")
    tr = sess(at).traces[-1]
    assert (tr.k, tr.temperature, tr.top_k, tr.top_p) == (3, 0.0, 20, 0.9)
    assert tr.drafts[0].u is None  # greedy: no uniform draw


@pytest.mark.parametrize(
    "widget,key,value,check",
    [
        ("radio", "layout", "contiguous", lambda s: s.prefill[0].layout == "contiguous"),
        ("select_slider", "page_size", 8, lambda s: s.prefill[0].page_size == 8),
        ("radio", "policy", "keep", lambda s: s.dec.config.free_policy == "keep"),
        ("number_input", "seed", 7, lambda s: s.dec.config.seed == 7),
        ("text_area", "prompt", "A different prompt.", lambda s: len(s.prompt_ids) == len("A different prompt.")),
        ("toggle", "chat", False, lambda s: True),
        ("radio", "proposer", "lookup", lambda s: s.dec.config.proposer == "lookup" and s.prefill[1] is None),
    ],
)
def test_restart_controls_restart_with_a_notice(widget, key, value, check):
    at = open_app()
    click(at, "next_cycle")
    getattr(at, widget)(key=key).set_value(value).run()
    assert_clean(at)
    s = sess(at)
    if key == "chat" and s.traces:
        pytest.skip("the tiny tokenizer has no chat template: toggling it changes nothing")
    assert s.traces == ()
    assert check(s)
    assert any("Restarted" in i.value for i in at.info)


def test_invariant_check_and_max_new_tokens_apply_live():
    at = open_app()
    at.toggle(key="check").set_value(True).run()
    at.number_input(key="max_new").set_value(3).run()
    click(at, "next_cycle")
    tr = sess(at).traces[-1]
    assert tr.invariant_max_abs_diff is not None
    assert max(tr.invariant_max_abs_diff.values()) < 1e-4
    for _ in range(4):
        if sess(at).dec.finished:
            break
        click(at, "next_cycle")
    assert sess(at).dec.finished
    click(at, "next_phase")  # past the end: a clear message, no exception
    assert any("finished" in w.value for w in at.warning)
    click(at, "back")  # still usable
    assert not at.exception


def test_whatif_scenario_gives_three_accepted_and_a_rejection_at_four():
    at = open_app()
    assert at.session_state["whatif"] is False  # never on by default
    click(at, "next_phase")
    click(at, "scenario")
    s = sess(at)
    tr = s.traces[-1]
    assert tr.k == 5 and tr.forced
    assert [d.verdict for d in tr.drafts] == ["accepted"] * 3 + ["rejected", "untested"]
    assert tr.num_accepted == 3 and tr.rejected_at == 4
    assert [e.kind for e in tr.emitted] == ["accepted"] * 3 + ["corrected"]
    assert at.slider(key="k").value == 5
    click(at, "next_phase", 2)  # to the acceptance phase: clearly labelled as breaking exactness
    assert any("What-if mode" in m.value for m in at.markdown)


def test_empty_prompt_is_an_error_and_the_app_recovers():
    at = open_app()
    at.text_area(key="prompt").set_value("   ").run()
    assert_clean(at)
    assert any("empty" in e.value for e in at.error)
    at.text_area(key="prompt").set_value("Hello again").run()
    assert_clean(at)
    click(at, "next_phase")
    assert len(sess(at).traces) == 1


def test_bad_custom_pair_shows_a_load_error():
    at = open_app()
    at.radio(key="pair_kind").set_value("custom").run()
    at.text_input(key="custom_target").set_value("/nonexistent/target-model").run()
    at.text_input(key="custom_draft").set_value("/nonexistent/draft-model").run()
    assert_clean(at)
    assert any("Could not load" in e.value for e in at.error)
    at.radio(key="pair_kind").set_value("tiny").run()  # back to a working pair
    assert_clean(at)
    click(at, "next_phase")


def test_distribution_position_selector():
    at = open_app()
    click(at, "next_phase", 2)
    at.session_state["dist_pos"] = 2
    at.run()
    assert_clean(at)
    titles = [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]
    assert any(t.startswith("p2 vs q2") for t in titles)


def test_statistics_baseline_lab_and_export():
    at = open_app()
    click(at, "next_cycle", 3)
    assert any(m.label == "Acceptance rate α" for m in at.metric)
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 3  # the cycle history table
    click(at, "baseline")
    assert sess(at).baseline_ms_per_token > 0
    speed = next(m for m in at.metric if m.label == "Measured speedup")
    assert speed.value.endswith("×")
    at.number_input(key="lab_n").set_value(10).run()
    click(at, "lab_run")
    lab = sess(at).lab
    assert lab is not None and lab.n == 10 and sum(lab.spec_counts) == 10
    assert any(
        "Exactness lab" in json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "")
        for c in at.get("plotly_chart")
    )
    downloads = at.get("download_button")
    assert len(downloads) == 2


def test_export_helpers_make_json_and_standalone_html():
    from app import figures_html  # noqa: PLC0415

    at = open_app()
    click(at, "next_cycle")
    from specviz.trace import traces_from_json, traces_to_json

    s = sess(at)
    assert traces_from_json(traces_to_json(list(s.traces))) == list(s.traces)
    figs = at.session_state["_figures"]
    assert "kv_cache" in figs
    html = figures_html(figs)
    assert html.count("plotly.js") >= 1 and "kv_cache" in html and "Plotly.addFrames" in html


def test_two_sessions_do_not_share_decoder_state():
    a = open_app()
    b = open_app()
    click(a, "next_cycle", 2)
    assert len(sess(a).traces) == 2
    b.run()
    assert sess(b).traces == () and sess(b).view == 0
    assert sess(a).dec is not sess(b).dec
    assert sess(a).pair is sess(b).pair  # the model pair itself is shared (cache_resource)


@pytest.mark.slow
def test_default_pair_opens_and_steps():
    at = AppTest.from_file(APP, default_timeout=600)
    at.run()
    assert_clean(at)
    if at.error:
        pytest.fail(f"default pair failed to load: {[e.value for e in at.error]}")
    click(at, "next_phase")
    s = sess(at)
    assert len(s.traces) == 1 and s.view == 1
    assert [f["name"] for f in kv_spec(at)["frames"]] == list(CYCLE_PHASES)
    click(at, "next_cycle", 2)
    assert len(sess(at).traces) == 2


def test_pool_exhaustion_and_full_context_are_reported():
    at = open_app(page_size=4)
    prompt_len = len(sess(at).prompt_ids)
    at.number_input(key="num_blocks").set_value(prompt_len // 4 - 2).run()  # too small for the prompt
    assert_clean(at)
    assert any("pool exhausted" in e.value for e in at.error)
    at.number_input(key="num_blocks").set_value(0).run()  # recover
    blocks = -(-prompt_len // 4) + 1  # one block of headroom
    at.number_input(key="num_blocks").set_value(blocks).run()
    for _ in range(6):
        click(at, "next_cycle")
        if at.error:
            break
    assert any("pool exhausted" in e.value for e in at.error)
    n_traces = len(sess(at).traces)
    click(at, "back")  # still usable; the failed step changed nothing
    assert len(sess(at).traces) == n_traces
    at.number_input(key="num_blocks").set_value(0).run()
    at.number_input(key="max_context").set_value(prompt_len + 7).run()
    for _ in range(8):
        if sess(at).dec.finished:
            break
        click(at, "next_cycle")
    assert sess(at).dec.finished and sess(at).dec.finish_reason == "context_full"


def test_example_prompt_selector_fills_the_prompt_and_restarts():
    at = open_app()
    example = at.selectbox(key="example").options[1]
    at.selectbox(key="example").set_value(example).run()
    assert_clean(at)
    assert at.text_area(key="prompt").value == example
    assert any("Restarted" in i.value for i in at.info)


def test_whatif_multiselects_force_chosen_outcomes():
    at = open_app()
    at.toggle(key="whatif").set_value(True).run()
    at.multiselect(key="force_reject").set_value([1]).run()
    click(at, "next_cycle")
    tr = sess(at).traces[-1]
    assert tr.forced and tr.rejected_at == 1 and tr.drafts[0].forced
    assert [d.verdict for d in tr.drafts[1:]] == ["untested"] * (tr.k - 1)
    assert at.toggle(key="whatif").value is False  # one cycle only: it switched itself off
    at.toggle(key="whatif").set_value(True).run()  # forcing again takes a deliberate click
    at.multiselect(key="force_reject").set_value([]).run()
    at.multiselect(key="force_accept").set_value([1, 2]).run()
    click(at, "next_cycle")
    tr = sess(at).traces[-1]
    assert [d.verdict for d in tr.drafts[:2]] == ["accepted", "accepted"]


def test_play_speed_control():
    at = open_app()
    at.select_slider(key="speed").set_value("fast (0.5 s)").run()
    click(at, "play")
    assert at.session_state["_holder"].playing and sess(at).view == 1
    click(at, "play")


# ---- proposers (DESIGN §1b) ------------------------------------------------------------------------


def titles(at: AppTest) -> list[str]:
    return [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in at.get("plotly_chart")]


def kv_texts(at: AppTest) -> list[str]:
    return [a.get("text", "") for a in kv_spec(at)["layout"]["annotations"]]


def test_proposer_selector_opens_on_the_preferred_proposer_and_restarts_like_a_cache_setting():
    from specviz.models import preferred_proposer

    at = open_app()
    s = sess(at)
    assert at.radio(key="proposer").value == preferred_proposer(s.pair) == s.dec.config.proposer
    assert at.radio(key="proposer").options == [
        "Draft model (a small LM)",
        "Feature head (EAGLE-style)",
        "Prompt lookup (n-gram copy)",
    ]
    click(at, "next_cycle", 2)
    at.radio(key="proposer").set_value("lookup").run()
    assert_clean(at)
    s = sess(at)
    # Exactly what changing the layout does: fresh decoder from the prompt, history cleared, one notice.
    assert s.traces == () and s.view == 0 and s.dec.config.proposer == "lookup"
    notes = [i.value for i in at.info if "Restarted" in i.value]
    assert notes == ["Restarted from the prompt because the proposer changed (history cleared)."]
    assert any("no draft cache" in t for t in kv_texts(at))  # the prefill view: no proposer panel
    assert any("Prompt lookup keeps **no cache**" in m.value for m in at.markdown)
    # A live setting afterwards keeps the new history, as with any other restart.
    click(at, "next_cycle")
    at.slider(key="k").set_value(2).run()
    assert_clean(at)
    assert len(sess(at).traces) == 1 and sess(at).dec.config.proposer == "lookup"
    # The user's choice sticks: it no longer follows the pair's preference.
    assert at.session_state["_proposer_auto"] is False
    at.run()
    assert sess(at).dec.config.proposer == "lookup" and len(sess(at).traces) == 1


def test_a_plain_target_step_renders_in_every_view():
    # Prompt lookup on distinct characters: nothing repeats, so the first cycle proposes nothing.
    at = open_app(proposer="lookup", _proposer_auto=False, prompt="abcdefghij", chat=False)
    assert sess(at).dec.config.proposer == "lookup"
    for phase in CYCLE_PHASES[1:]:
        click(at, "next_phase")
        assert phase_shown(at) == (0, phase)
        tr = sess(at).traces[0]
        assert tr.k == 0
        assert any("no draft cache" in t for t in kv_texts(at))
        shown = titles(at)
        assert any(t.startswith("Draft proposals: none this cycle") for t in shown)
        if phase in ("verify", "accept", "resolve", "rollback"):
            assert any(t.startswith("Acceptance: nothing to test") for t in shown)
            assert any("No proposal this cycle" in i.value for i in at.info)  # instead of p vs q
    assert any("generated from p1" in t for t in titles(at))
    assert any("removes nothing" in m.value for m in at.markdown)
    assert any("generated (no proposal)" in h.proto.body for h in at.get("html"))
    # Statistics over plain steps only: no draft was tested, so α is not a number yet.
    alpha = next(m for m in at.metric if m.label == "Acceptance rate α")
    assert alpha.value == "—"
    assert any("plain step(s) without a proposal" in t for t in titles(at))


def test_feature_head_proposer_shows_its_one_layer_cache():
    at = open_app(proposer="feature", _proposer_auto=False)
    assert sess(at).dec.config.proposer == "feature" and sess(at).prefill[1] is not None
    assert any("Feature head cache (1 layer: pairs of target feature + next token)" in t for t in kv_texts(at))
    click(at, "next_phase")  # draft
    tr = sess(at).traces[0]
    head = tr.snapshot("draft").draft
    assert any(f"{head.seq_len - head.num_committed} from predicted features" in t for t in kv_texts(at))
    assert any("**own predicted** feature" in m.value for m in at.markdown)
    click(at, "next_phase", 4)  # rollback
    assert any("built from the head's own **predicted** features" in m.value for m in at.markdown)


def test_feature_option_is_withdrawn_when_the_pair_has_no_head():
    at = open_app(proposer="feature", _proposer_auto=False)
    pair = sess(at).pair  # the process-wide cached tiny pair: restore its head whatever happens
    head = pair.feature_head
    try:
        object.__setattr__(pair, "feature_head", None)
        at.run()
        assert_clean(at)
        assert "Feature head (EAGLE-style)" not in at.radio(key="proposer").options
        assert sess(at).dec.config.proposer == "draft"
        assert any("Feature head: unavailable" in c.value for c in at.caption)
        assert any("proposer changed" in i.value for i in at.info)
    finally:
        object.__setattr__(pair, "feature_head", head)
