"""The app under AppTest: numbers from the trace, what-if scoped to one cycle, statistics that explain.

* the status line tells the finish reason only at the resolve and rollback phases of the cycle that
  ended the text, and counts cycles from 1 (so do the history slider, the table and the KV title);
* the walkthrough scenario and the what-if toggle force ONE cycle, then exact decoding resumes with a
  visible note; the forced cycle is marked in the history slider, the token strip, the time bar and
  the table, and left out of the statistics;
* a forced acceptance of an end-of-text draft does not end the text (a tiny pair that can emit
  end-of-text, `SPECVIZ_TINY_EOS=1`, and a seed found by search);
* Reset asks before clearing recorded cycles;
* the statistics show v(K), the time bar and a sentence explaining measured vs theory; at T = 0 the
  proposals chart says that q is one-hot.
"""

from __future__ import annotations

import json

import pytest
from test_app import assert_clean, click, history, kv_phase, kv_view, open_app, shown, strip_html, texts, workspace

import specviz
from specviz import whatif
from specviz.stats import acceptance_stats
from specviz.trace import CYCLE_PHASES


def status(at) -> str:
    return next(t for t in texts(at) if " · phase **" in t)


def chart(at, title_start: str) -> dict:
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        if spec["layout"].get("title", {}).get("text", "").startswith(title_start):
            return spec
    raise AssertionError(f"no chart titled {title_start!r}")


# ---- numbers from the trace ------------------------------------------------------------------------


def test_status_line_tells_the_finish_only_at_resolve_and_rollback():
    at = open_app()
    at.number_input(key="max_new").set_value(2).run()
    seen = []
    for _ in range(12):
        click(at, "next_phase")
        run = shown(at)
        cycle = (run.view - 1) // 5
        phase = CYCLE_PHASES[(run.view - 1) % 5 + 1]
        line = status(at)
        assert line.startswith(f"cycle **{cycle + 1}** of {len(run.traces)}")
        seen.append((phase, "finished:" in line))
        if run.dec.finished and phase == "rollback":
            break
    assert run.dec.finished and run.traces[-1].finish_reason == "max_new_tokens"
    last_cycle = seen[-5:]  # draft, verify, accept, resolve, rollback of the cycle that ended the text
    assert [told for _, told in last_cycle] == [False, False, False, True, True]
    assert not any(told for _, told in seen[:-5])
    assert any("**Generation finished:** max_new_tokens" in t for t in texts(at))


def test_cycles_are_numbered_from_one_in_the_slider_table_and_kv_title():
    at = open_app(tab="stats")
    click(at, "next_cycle", 2)
    options = history(at).options
    assert options[0] == "cycle 1 · Start of cycle"
    assert options[1] == "cycle 1 · 1 · Draft proposes" and options[-1] == "cycle 2 · 5 · Rollback & commit"
    assert kv_phase(kv_view(at)) == "Cycle 2 · 5 · Rollback & commit"
    table = at.dataframe[0].value
    assert list(table["cycle"]) == [1, 2]
    history(at).set_value(0).run()  # the start of cycle 1
    assert any("**Cycle 1 starts**" in t for t in texts(at))


# ---- what-if, scoped ---------------------------------------------------------------------------------


def test_walkthrough_scenario_forces_one_cycle_then_decoding_is_exact_again():
    at = open_app()
    click(at, "next_cycle")
    click(at, "scenario")
    run = shown(at)
    assert run.traces[-1].forced and run.traces[-1].rejected_at == 4
    assert at.toggle(key="whatif").value is False and run.dec.config.forced_outcomes == ()
    notes = [i.value for i in at.info]
    assert any("What-if applied to cycle 2 only" in n and "switched itself off" in n for n in notes)
    assert "⚠️ **what-if cycle**" in status(at)
    click(at, "next_cycle", 3)  # finish the forced cycle, then two more, without touching what-if
    run = shown(at)
    assert [t.forced for t in run.traces] == [False, True, False, False]
    assert not any("What-if applied" in i.value for i in at.info)  # the note was shown once


def test_forced_cycles_are_marked_in_every_view_and_left_out_of_the_statistics():
    at = open_app(tab="stats")
    click(at, "next_cycle")
    click(at, "scenario")
    click(at, "next_cycle", 2)
    run = shown(at)
    assert [t.forced for t in run.traces] == [False, True, False]
    # History slider, token strip (hover + legend), table, time bar.
    assert "cycle 2 (what-if) · 3 · Acceptance tests" in history(at).options
    strip = strip_html(at)
    assert "what-if (forced) cycle" in strip and "WHAT-IF cycle" in strip
    assert list(at.dataframe[0].value["forced"]) == ["", "what-if: not in the statistics", ""]
    time_fig = chart(at, "Time per cycle")
    assert time_fig["data"][0]["x"] == ["1", "2 what-if", "3"]
    assert time_fig["data"][0]["marker"]["pattern"]["shape"] == ["", "/", ""]
    # Statistics: α over the two exact cycles only.
    exact = acceptance_stats([run.traces[0], run.traces[2]])
    alpha = next(m for m in at.metric if m.label == "Acceptance rate α")
    assert alpha.value == (f"{exact.alpha:.3f}" if exact.tested else "—")
    assert "1 forced (what-if) cycle(s) excluded" in chart(at, "2 cycles")["layout"]["title"]["text"]
    assert any("left out of the acceptance rate" in c.value for c in at.caption)


def test_whatif_toggle_switches_itself_off_after_one_cycle():
    at = open_app()
    at.toggle(key="whatif").set_value(True).run()
    at.multiselect(key="force_accept").set_value([1, 2]).run()
    click(at, "next_phase")  # computes the forced cycle
    assert shown(at).traces[-1].forced
    assert at.toggle(key="whatif").value is False
    assert any("switched itself off" in i.value for i in at.info)
    click(at, "next_cycle", 2)
    assert [t.forced for t in shown(at).traces] == [True, False]


@pytest.fixture
def eos_app(monkeypatch):
    """The tiny pair with an end-of-text token, and a decoder seed whose cycle `c` would end the
    text if the walkthrough's forced acceptances were applied blindly."""
    from specviz.ui.stage import WALKTHROUGH  # noqa: PLC0415

    monkeypatch.setenv("SPECVIZ_TINY_EOS", "1")
    at = open_app(prompt="Hello there", chat=False)
    cfg = shown(at).dec.config
    pair = shown(at).pair
    assert pair.tokenizer.eos_token_id in shown(at).dec.eos_ids
    for seed in range(40):
        dec = specviz.SpeculativeDecoder(pair, cfg.replace(seed=seed))
        dec.start(pair.tokenizer.encode("Hello there"))
        for cycle in range(30):
            if dec.finished:
                break
            probe = dec.fork()
            probe.update_config(probe.config.replace(k=5, forced_outcomes=WALKTHROUGH))
            result = whatif.forced_step(probe)
            if result.stopped_at is not None and not result.decoder.finished:
                return at, seed, cycle, result.stopped_at
            dec.step()
    pytest.fail("no seed where the walkthrough would force-accept an end-of-text draft")


def test_forcing_never_ends_the_text_at_an_end_of_text_draft(eos_app):
    at, seed, cycle, e = eos_app
    at.number_input(key="seed").set_value(seed).run()
    assert_clean(at)
    if cycle:
        click(at, "next_cycle", cycle)
    click(at, "scenario")
    run = shown(at)
    tr = run.traces[-1]
    assert tr.drafts[e - 1].token_id in run.dec.eos_ids and not tr.drafts[e - 1].forced
    assert not run.dec.finished and tr.finish_reason is None
    assert any(f"d{e} is the end-of-text token, so forcing stopped there" in i.value for i in at.info)
    click(at, "next_cycle", 2)  # the text goes on
    assert len(shown(at).traces) == cycle + 2


# ---- reset asks ------------------------------------------------------------------------------------------


def test_reset_asks_before_clearing_the_history():
    at = open_app()
    click(at, "next_cycle", 2)
    click(at, "reset")
    assert len(shown(at).traces) == 2  # nothing lost yet
    asked = "Reset starts again from the prompt"
    assert any(asked in w.value and "this run's 2 recorded cycles" in w.value for w in at.warning)
    assert {"reset_keep", "reset_confirm", "reset_cancel"} <= {b.key for b in at.button}
    click(at, "reset_cancel")
    assert len(shown(at).traces) == 2 and not any(asked in w.value for w in at.warning)
    click(at, "reset")
    click(at, "next_phase")  # any other action withdraws the question
    assert len(shown(at).traces) == 3 and not any(asked in w.value for w in at.warning)
    click(at, "reset")
    assert any("this run's 3 recorded cycles" in w.value for w in at.warning)
    first = shown(at)
    click(at, "reset_keep")  # start over, keeping the run in the Runs tab
    assert shown(at).traces == () and any("stays in the Runs tab" in i.value for i in at.info)
    assert [r.id for r in workspace(at).others] == [first.id] and workspace(at).others[0].traces == first.traces
    click(at, "next_cycle")
    click(at, "reset")
    click(at, "reset_confirm")  # discard: the cleared run is gone, not kept in the run list
    assert shown(at).traces == () and any("Reset" in i.value for i in at.info)
    assert [r.id for r in workspace(at).others] == [first.id]
    click(at, "reset")  # nothing recorded: nothing to ask
    assert not any(asked in w.value for w in at.warning)


# ---- statistics that explain -------------------------------------------------------------------------


def test_statistics_show_v_of_k_the_time_bar_and_why_measured_differs_from_theory():
    at = open_app(tab="stats")
    click(at, "next_cycle", 3)
    assert any("Run the **autoregressive baseline**" in m.value for m in at.markdown)
    click(at, "baseline")
    run = shown(at)
    v = next(m for m in at.metric if m.label == "Verify cost v(K)")
    verify_ms = sum(t.timings_ms["verify"] for t in run.traces) / 3
    assert v.value == f"{verify_ms / run.baseline_ms_per_token:.2f} steps"
    why = next(m.value for m in at.markdown if m.value.startswith("**Measured "))
    assert f"**v(K) = {verify_ms / run.baseline_ms_per_token:.2f}** plain steps" in why
    assert "bookkeeping the formula leaves out" in why
    speed = chart(at, "Speedup")
    assert speed["data"][0]["x"] == [
        "textbook theory",
        "theory with measured v(K)",
        "+ bookkeeping",
        "measured vs autoregressive",
    ]
    time_fig = chart(at, "Time per cycle")
    assert time_fig["data"][0]["x"] == ["1", "2", "3"]
    assert time_fig["layout"]["yaxis"]["rangemode"] == "tozero"
    assert any(d["name"] == "plain decoding, same tokens" for d in time_fig["data"])


def test_greedy_proposals_chart_says_q_is_one_hot():
    at = open_app()
    at.slider(key="temperature").set_value(0.0).run()
    click(at, "next_phase")
    title = chart(at, "Draft proposals")["layout"]["title"]["text"]
    assert "greedy, one-hot q" in title and "not confidence" in title
