"""The app's newer controls under AppTest, on the tiny random pair (one test opens the default pair).

* lecture mode: bigger type, the tabs hidden;
* the quiz: asked at the verify phase, scored against the trace, shown from accept on, tallied in
  the statistics;
* runs kept across a restart, and showing an earlier one brings its settings and history back;
* run files: the Export tab's run file opens (sidebar uploader) as an imported run that steps
  through every phase without any model call; the standalone run page has its own Next/Back;
* the side-by-side replay into another cache layout;
* the scenario gallery (default pair);
* `Run.before`, the step the picture animates from, is set by every move.
"""

from __future__ import annotations

import re

import pytest
import torch
from streamlit.runtime.media_file_manager import MediaFileManager
from test_app import (
    assert_clean,
    click,
    history,
    kv_panels,
    kv_phase,
    kv_view,
    kv_views,
    open_app,
    open_tab,
    phase_shown,
    shown,
    stage_payload,
    texts,
    workspace,
)

from specviz.runfile import load_run
from specviz.scenarios import facts_of, load_scenarios
from specviz.trace import CYCLE_PHASES
from specviz.ui import quiz
from specviz.viz.style import PHASE_TITLES


@pytest.fixture
def downloads(monkeypatch):
    """The data callables of the page's download buttons, by file name (Streamlit runs them on click)."""
    made: dict[str, object] = {}
    original = MediaFileManager.add_deferred

    def add_deferred(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        made[file_name] = data_callable
        return original(self, data_callable, mimetype, coordinates, file_name=file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", add_deferred)
    return made


# ---- lecture mode ------------------------------------------------------------------------------


def test_lecture_mode_enlarges_the_picture_and_hides_the_tabs():
    at = open_app()
    click(at, "next_phase")
    assert len(at.tabs) == 5 and kv_view(at).startswith("<div class='svkv' ")
    assert "block_table [" in kv_view(at)
    at.toggle(key="lecture").set_value(True).run()
    assert_clean(at)
    assert not at.tabs and not at.get("plotly_chart")
    assert any("Lecture mode shows the stage only" in c.value for c in at.caption)
    body = kv_view(at)
    assert body.startswith("<div class='svkv svkv-lecture' ")
    assert "block_table [" not in body  # lecture type drops the secondary lines
    assert kv_phase(body) == f"Cycle 1 · {PHASE_TITLES['draft']}"
    click(at, "next_phase")  # the stage works as usual
    assert phase_shown(at) == (0, "verify")
    at.toggle(key="lecture").set_value(False).run()
    assert len(at.tabs) == 5 and kv_view(at).startswith("<div class='svkv' ")


# ---- quiz --------------------------------------------------------------------------------------


def _answer(at, accepted: int, dropped, freed) -> None:
    at.radio(key="quiz_accepted").set_value(accepted)
    at.multiselect(key="quiz_dropped").set_value(list(dropped))
    at.multiselect(key="quiz_freed").set_value(list(freed)).run()  # the button waits for an answer
    click(at, "quiz_submit")


def _quiz_caption(at) -> str:
    """The quiz's feedback beside the stage (markdown in the narrative's size, not a grey caption)."""
    return next(m.value for m in at.markdown if m.value.startswith("**Quiz** —"))


def test_quiz_asks_at_verify_scores_against_the_trace_and_tallies():
    at = open_app(quiz=True)
    click(at, "next_phase")  # draft: nothing asked yet
    assert not [b for b in at.button if b.key == "quiz_submit"]
    assert stage_payload(at)["quiz"] == [2]  # the browser holds once at this cycle's verify step
    click(at, "next_phase")  # verify: the target has scored the drafts, the page asks
    run = shown(at)
    truth = quiz.truth(run.traces[0])
    assert at.radio(key="quiz_accepted").options == [str(i) for i in range(truth.k + 1)]
    assert at.radio(key="quiz_accepted").value is None  # nothing chosen for the student
    assert at.button(key="quiz_submit").disabled  # locked in only once an answer is chosen
    assert at.multiselect(key="quiz_dropped").options == [str(p) for p in truth.candidates]
    assert at.multiselect(key="quiz_freed").options == [str(b) for b in truth.candidate_blocks]
    assert truth.candidate_blocks  # paged + free: the block question is asked
    _answer(at, truth.accepted, truth.dropped, truth.freed)  # all right
    run = shown(at)
    assert phase_shown(at) == (0, "accept")  # locking in reveals the next phase
    assert [r.score for r in run.quiz] == [(3, 3)]
    caption = _quiz_caption(at)  # from accept on: the accepted count only, the rest after rollback
    assert f"✓ drafts accepted: you said {truth.accepted}, it was {truth.accepted}" in caption
    # no spoilers: neither the rollback answers nor the running score (it would tell them) before rollback
    assert "positions dropped" not in caption and "Score over this run" not in caption
    assert "The rest of your answers at the rollback" in caption
    click(at, "next_phase", 2)  # rollback: every answer is shown
    caption = _quiz_caption(at)
    assert "✓ positions dropped from the target cache" in caption and "✓ blocks returned to the pool" in caption
    assert "Score over this run: 3/3" in caption

    click(at, "next_phase", 2)  # cycle 2: draft, verify
    assert at.radio(key="quiz_accepted").value is None  # the last answer is not carried over
    assert at.multiselect(key="quiz_dropped").value == []
    truth = quiz.truth(shown(at).traces[1])
    wrong = (truth.accepted + 1) % (truth.k + 1)
    not_dropped = [p for p in truth.candidates if p not in truth.dropped][:1]
    _answer(at, wrong, not_dropped, truth.freed)  # two wrong, one right
    result = shown(at).quiz[-1]
    assert result.cycle == 1 and result.score == (1, 3)
    assert [ok for *_, ok in result.marks()] == [False, False, True]
    caption = _quiz_caption(at)
    assert f"✗ drafts accepted: you said {wrong}, it was {truth.accepted}" in caption
    click(at, "next_phase", 2)  # the score only at the rollback
    assert "Score over this run: 4/6" in _quiz_caption(at)
    open_tab(at, "stats")
    assert any("**Quiz**: 4 of 6 predictions right over 2 cycle(s)." in m.value for m in at.markdown)


def test_quiz_is_not_asked_when_stepping_back_through_history():
    at = open_app(quiz=True)
    click(at, "next_cycle")  # cycle 1 revealed to its rollback without answering
    history(at).set_value(2).run()  # back to its verify phase
    assert_clean(at)
    assert phase_shown(at) == (0, "verify")
    assert not [b for b in at.button if b.key == "quiz_submit"]  # the outcome is already known


# ---- runs kept across restarts -----------------------------------------------------------------


def test_an_earlier_run_comes_back_with_its_settings_and_history():
    at = open_app()
    click(at, "next_cycle", 2)
    first = shown(at)
    at.radio(key="layout").set_value("contiguous").run()
    at.number_input(key="seed").set_value(7).run()
    assert_clean(at)
    click(at, "next_cycle")
    second = shown(at)
    assert second.id != first.id and second.prefill[0].layout == "contiguous" and second.config.seed == 7
    assert [r.id for r in workspace(at).others] == [first.id]  # the empty run in between is not kept
    listed = at.button(key=f"show_run_{first.id}")  # listed in the sidebar as a button, not shown (no ▶)
    assert listed.label == first.label()
    click(at, f"show_run_{first.id}")
    run = shown(at)
    assert run.id == first.id and run.traces == first.traces and run.view == run.revealed == 10
    assert [r.id for r in workspace(at).others] == [second.id]
    # Its settings are back in the sidebar, so no new run starts and the picture is paged again.
    assert at.radio(key="layout").value == "paged" and at.number_input(key="seed").value == 0
    assert "block_table [" in kv_view(at) and kv_phase(kv_view(at)).startswith("Cycle 2 · ")
    assert any("caches were released" in i.value for i in at.info)  # its decoder was rebuilt
    click(at, "next_cycle")  # and it goes on exactly where it was
    assert shown(at).id == first.id and len(shown(at).traces) == 3
    assert shown(at).traces[:2] == first.traces
    # The other run is still selectable, with its own settings.
    click(at, f"show_run_{second.id}")
    assert shown(at).id == second.id and at.radio(key="layout").value == "contiguous"
    assert at.number_input(key="seed").value == 7 and len(shown(at).traces) == 1


# ---- run files: export, import, standalone page ------------------------------------------------


def test_export_gives_a_loadable_run_file_and_a_standalone_page(downloads):
    at = open_app(tab="export")
    assert at.get("download_button")[0].proto.disabled  # nothing recorded yet
    click(at, "next_cycle", 2)
    run = shown(at)
    record = load_run(downloads["specviz-run.json"]())
    assert record.traces == run.traces and record.prompt_ids == run.prompt_ids and record.prefill == run.prefill
    assert record.proposer == run.proposer and record.config == run.dec.config
    assert all(record.token_text(e.token_id) == run.texts(e.token_id) for t in run.traces for e in t.emitted)
    page = downloads["specviz-run.html"]()
    steps = re.findall(r"<section class='step' data-title='([^']*)'>", page)
    assert steps == ["prefill"] + [f"cycle {c} · {p}" for c in (1, 2) for p in CYCLE_PHASES[1:]]
    assert "id='back'" in page and "id='next'" in page and "<script src=" not in page


def test_an_imported_run_steps_through_every_phase_without_a_model(downloads, monkeypatch):
    live = open_app(tab="export")
    click(live, "next_cycle", 2)
    data = downloads["specviz-run.json"]()
    traces = shown(live).traces

    at = open_app()
    calls = []

    def no_model(self, *args, **kwargs):
        calls.append(type(self).__name__)
        raise RuntimeError("an imported run must not run a model")

    monkeypatch.setattr(torch.nn.Module, "__call__", no_model)
    monkeypatch.setattr("specviz.ui.session.load_pair_cached", no_model)
    at.file_uploader(key="run_file").set_value(("lecture.json", data.encode(), "application/json")).run()
    assert_clean(at)
    run = shown(at)
    assert run.source == "imported" and run.dec is None and run.pair is None and run.traces == traces
    assert run.view == 0 and kv_phase(kv_view(at)) == f"Cycle 1 · {PHASE_TITLES['start']}"
    assert "imported run (no model)" in next(t for t in texts(at) if " · phase **" in t)
    for cycle in range(2):
        for phase in CYCLE_PHASES[1:]:
            click(at, "next_phase")
            assert phase_shown(at) == (cycle, phase)
            assert kv_phase(kv_view(at)) == f"Cycle {cycle + 1} · {PHASE_TITLES[phase]}"
    click(at, "next_phase")  # past the recording's end: a clear message, nothing breaks
    assert any("recording with 2 cycle(s)" in e.value for e in at.error)
    click(at, "back")
    assert phase_shown(at) == (1, "resolve")
    assert calls == []
    assert [r.id for r in workspace(at).others] == []  # the empty live run it replaced is not kept
    imported = shown(at)

    monkeypatch.undo()  # a live run again, from the sidebar's settings: the models are back
    click(at, "live_again")
    live = shown(at)
    assert live.source == "live" and live.id != imported.id and live.traces == ()
    assert [r.id for r in workspace(at).others] == [imported.id]  # the recording stays in the list
    notes = [i.value for i in at.info if i.value.startswith("New ")]
    assert notes == [f"New live run from the sidebar's settings. Run #{imported.id} stays in the run list."]
    click(at, "next_phase")  # the same live run steps (no second new run)
    assert shown(at).id == live.id and len(shown(at).traces) == 1


# ---- side-by-side replay -----------------------------------------------------------------------


def test_compare_draws_the_same_cycles_in_another_cache_layout():
    at = open_app(tab=None)
    click(at, "next_cycle")
    assert len(kv_views(at)) == 1
    at.radio(key="compare_layout").set_value("contiguous")
    at.toggle(key="compare_on").set_value(True).run()
    assert_clean(at)
    real, other = kv_views(at)
    assert kv_phase(real) == kv_phase(other) == f"Cycle 1 · {PHASE_TITLES['rollback']}"
    assert "block_table [" in real and "block_table [" not in other and "write pointer at slot" in other
    assert any("replayed into a contiguous cache" in m.value for m in at.markdown)
    # Same tokens, same verdicts: only the bookkeeping differs.
    assert re.findall(r"svkv-v-(\w+)' data-d=", real) == re.findall(r"svkv-v-(\w+)' data-d=", other)
    at.radio(key="compare_layout").set_value("paged")
    at.select_slider(key="compare_page").set_value(4)
    at.radio(key="compare_policy").set_value("keep").run()
    assert_clean(at)
    _, other = kv_views(at)
    assert "4 slots per block · policy keep" in kv_panels(other)["Target cache"]
    click(at, "back")  # the replay follows the stage's step
    real, other = kv_views(at)
    assert kv_phase(real) == kv_phase(other) == f"Cycle 1 · {PHASE_TITLES['resolve']}"
    at.toggle(key="compare_on").set_value(False).run()
    assert len(kv_views(at)) == 1


# ---- Run.before: where the picture animates from -----------------------------------------------


def test_every_move_sets_the_step_the_picture_animates_from():
    at = open_app()
    assert shown(at).before is None and "data-role='action'" not in kv_view(at)  # a new run: no step before
    moves = [
        (lambda: click(at, "next_phase"), 0, 1),
        (lambda: click(at, "next_cycle"), 1, 5),
        (lambda: click(at, "back"), 5, 4),
        (lambda: history(at).set_value(2).run(), 4, 2),
        (lambda: click(at, "next_phase"), 2, 3),  # replaying a revealed phase
        (lambda: click(at, "next_cycle"), 3, 5),
        (lambda: click(at, "next_phase"), 5, 6),  # a new cycle
        (lambda: click(at, "scenario"), 6, 11),  # the walkthrough's forced cycle
    ]
    for move, before, view in moves:
        move()
        assert_clean(at)
        run = shown(at)
        assert (run.before, run.view) == (before, view)
    click(at, "back", 2)
    click(at, "next_phase")
    assert (shown(at).before, shown(at).view) == (9, 10)
    # The stage's picture is patched in the browser; the rows the rollback changed are marked, for
    # the one-screen layout and for anyone checking what the phase did.
    assert "data-role='action'" in kv_view(at)


# ---- scenario gallery (default pair) -----------------------------------------------------------


@pytest.mark.slow
def test_a_gallery_scenario_loads_on_the_default_pair_at_its_cycle():
    scenario = next(s for s in load_scenarios() if s.id == "all-accepted")
    at = open_app(tab=None)
    at.default_timeout = 900
    click(at, f"scenario_{scenario.id}")
    if any("Could not load" in e.value for e in at.error):
        pytest.fail(f"default pair failed to load: {[e.value for e in at.error]}")
    run = shown(at)
    assert at.radio(key="pair_kind").value == "default" and run.title == scenario.title
    notice = next(i.value for i in at.info if i.value.startswith("Scenario "))
    assert f"**{scenario.title}**" in notice and f"cycle {scenario.cycle + 1}" in notice
    assert run.config == scenario.config() and run.prompt_text == scenario.prompt
    # The step before the lesson's cycle: its start (cycle 0), or the previous cycle's rollback (the same step)
    assert phase_shown(at) == ((0, "start") if scenario.cycle == 0 else (scenario.cycle - 1, "rollback"))
    assert facts_of(run.traces[scenario.cycle], sorted(run.dec.eos_ids)) == scenario.expect
    click(at, "next_phase")  # the lesson's cycle, from its draft phase on
    assert kv_phase(kv_view(at)) == f"Cycle {scenario.cycle + 1} · {PHASE_TITLES['draft']}"
