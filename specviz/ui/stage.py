"""The stage: what a lecture looks at, on one screen.

Top to bottom: the step buttons, then the stage component (`stage_component`: the status line, the
KV-cache picture, the narrative of the phase beside it, the token strip), the quiz when it is on,
the history slider and the tabs. The component steps through the phases it has in the browser; the
buttons' own callbacks are the server path (what a harness without JavaScript clicks). Below the
buttons the stage runs as a Streamlit fragment, so what the component asks of the server re-runs
only that part of the page (or, through the stage's own route, nothing: `stage_route`).

Keyboard: → next phase, Shift+→ next cycle, ← back (answered by the component), P play/pause
(a Streamlit button shortcut); every control is a real button or widget, so Tab reaches it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import streamlit as st

from ..errors import SpecvizError
from ..proposers import registry
from ..timeline import end_of, reached
from ..viz.kv_html import LECTURE_ROWS
from ..viz.stage_data import AUTO_CHIP
from ..viz.style import PHASE_TITLES
from . import quiz, stage_component
from .runs import compare_settings, compare_timeline, compare_title, record_fields
from .session import act, decoding_slot, request_full_run, take_full_run_request, workspace
from .sidebar import SPEEDS
from .stage_protocol import PageView
from .state import Run, advance_cycle, advance_phase, back, compute_cycle, seek, step_label, view_of
from .tab_export import run_file_button

WALKTHROUGH = ((1, True), (2, True), (3, True), (4, False))
# Cache rows drawn around the action; the rest fold into the overview strip. Six rows keep the
# action above the fold at 1440x900 with the buttons and the status line; in lecture mode the
# action rows and at most two rows of context, which a screen under 820 px leaves out (kv.css: a
# block of 16 readable tokens takes two lines at 1280x720).
STAGE_ROWS = 6
HISTORY = "history"  # the history slider's key prefix


# ---------------------------------------------------------------- actions (callbacks) ---------


def on_next_phase() -> None:
    act(lambda r: advance_phase(r, decoding_slot))


def on_next_cycle() -> None:
    act(lambda r: advance_cycle(r, decoding_slot))


def on_back() -> None:
    act(back)


def on_history(key: str, drawn: int) -> None:
    wanted = int(st.session_state[key])  # read before the lock: see Workspace
    if wanted == drawn:  # the slider's own value coming back (a first report of a new slider): no move
        return
    act(lambda r: seek(r, wanted))


def on_play() -> None:
    ws = workspace()
    ws.playing = not ws.playing
    if ws.playing:
        on_next_phase()  # the first step happens at once; the timer does the rest


def on_reset() -> None:
    """Reset asks first when there are recorded cycles: clearing them silently loses a lecture's run."""
    ws = workspace()
    ws.playing = False
    if ws.run is not None and ws.run.traces:
        ws.reset_asked = ws.run  # the question shows under the buttons
        return
    reset_now()


def reset_now(keep: bool = False) -> None:
    """Start again from the prompt; with `keep`, the run so far stays in the run list."""
    ws = workspace()
    with ws.lock:
        if keep:
            ws.add(None)
        ws.run = ws.reset_asked = None  # rebuilt from the current controls on this run
        ws.playing, ws.error, ws.finished_note = False, None, None
    kept = " The run so far stays in the Runs tab." if keep else ""
    st.session_state.reset_notice = f"Reset: the decoder restarted from the prompt.{kept}"
    request_full_run()


def on_reset_cancel() -> None:
    workspace().reset_asked = None


def on_walkthrough() -> None:
    """One click: K = 5, force d1–d3 accept and d4 reject for ONE cycle, and run it.

    The forcing goes straight to the decoder for this cycle (`compute_cycle` clears it afterwards);
    the what-if toggle stays off, so the next cycle is exact without anyone having to remember."""
    ss = st.session_state
    ss.k, ss.k_mode, ss.whatif = 5, "fixed", False
    workspace().playing = False

    def run(r: Run) -> Run:
        if not r.live:
            raise SpecvizError("The walkthrough needs a live run: this one is a recording. Change a setting first.")
        r.dec.update_config(r.dec.config.replace(k=5, forced_outcomes=WALKTHROUGH))
        new = compute_cycle(dataclasses.replace(r, revealed=end_of(len(r.traces))), decoding_slot)
        lesson = ("Walkthrough scenario: K = 5 with d1–d3 forced to accept and d4 to reject, for this one cycle. "
                  "Step through the phases to follow the walkthrough.")
        return dataclasses.replace(new, notices=(lesson, *new.notices))

    act(run)


def on_quiz_submit(cycle: int) -> None:
    ss = st.session_state
    accepted, path = ss.get("quiz_accepted"), ss.get("quiz_path")  # path: a token tree's, by its last node
    if accepted is None and path is None:  # nothing chosen yet (the button waits for an answer)
        return
    guess = (int(accepted or 0), list(ss.get("quiz_dropped") or []), list(ss.get("quiz_freed") or []))

    def run(r: Run) -> Run:
        tr = r.traces[cycle]
        result = quiz.answer(tr, *guess, path_end=None if tr.tree is None else int(path or 0))
        answered = dataclasses.replace(r, quiz=(*[q for q in r.quiz if q.cycle != cycle], result))
        return advance_phase(answered, decoding_slot)

    act(run)


# ---------------------------------------------------------------- views -----------------------


BUTTON_ROW = "stage_buttons"  # the button row's container: lecture mode narrows it to the picture's column


def button_row(run: Run | None) -> None:
    cols = st.container(key=BUTTON_ROW).columns([1.5, 1.7, 1.1, 1.2, 1.1, 1.5])
    disabled = run is None
    playing = workspace().playing
    # Material icons ship with Streamlit's frontend (no emoji font needed on the viewer's machine).
    buttons = (
        ("Next phase", "next_phase", on_next_phase, ":material/play_arrow:", "Right", "primary"),
        ("Next cycle", "next_cycle", on_next_cycle, ":material/skip_next:", "Shift+Right", "secondary"),
        # Not disabled at step 0: the browser may be further on than the server knows yet.
        ("Back", "back", on_back, ":material/undo:", "Left", "secondary"),
        ("Pause" if playing else "Play", "play", on_play,
         ":material/pause:" if playing else ":material/slow_motion_video:", "P", "secondary"),
    )  # fmt: skip
    for col, (label, key, fn, icon, shortcut, kind) in zip(cols, buttons, strict=False):
        col.button(
            label, key=key, on_click=fn, type=kind, disabled=disabled, icon=icon, shortcut=shortcut, width="stretch",
            help=f"Keyboard: {shortcut.replace('Right', '→').replace('Left', '←')}",
        )  # fmt: skip
    cols[4].button("Reset", key="reset", on_click=on_reset, icon=":material/restart_alt:", width="stretch")


def reset_question(run: Run) -> None:
    """'Reset starts again — keep these N cycles?' (and a way to save them first)."""
    n = len(run.traces)
    cycles = f"{n} recorded cycle{'s' if n != 1 else ''}"
    with st.container(border=True):
        st.warning(f"**Reset starts again from the prompt.** Keep this run's {cycles} in the Runs tab, or discard "
                   "them?", icon=":material/warning:")
        c1, c2, c3, c4 = st.columns(4)
        c1.button("Reset, keep this run", key="reset_keep", on_click=reset_now, args=(True,), type="primary")
        c2.button(f"Reset and discard {cycles}", key="reset_confirm", on_click=reset_now)
        c3.button("Cancel", key="reset_cancel", on_click=on_reset_cancel)
        run_file_button(c4, "Download the run file (JSON)", "reset_download", record_fields(run))


def proposer_label(run: Run) -> str:
    return registry.get(run.proposer).words.noun


def status_suffix(run: Run) -> str:
    return settings_chip(run) + ("" if run.live else f" · {run.source} run (no model)")


def settings_chip(run: Run) -> str:
    """K, temperature, proposer and layout as the status line's chips (markdown code spans, drawn as
    chips by stage.css), so a setting changed live shows on the stage the room sees."""
    config = run.dec.config if run.dec is not None else run.config
    temperature = "greedy" if config.temperature == 0 else f"T = {config.temperature:g}"
    layout = "chain" if config.tree_width <= 1 else f"tree {config.tree_width}×{config.tree_nodes}"
    # An auto run's chip names each cycle's chosen K on its steps (`stage_data.chosen_k`).
    k = AUTO_CHIP if config.k == "auto" else f"`K = {config.k}`"
    return f" · {k} `{temperature}` `{proposer_label(run)}` `{layout}`"


QUIZ_ANSWERS = ("quiz_accepted", "quiz_dropped", "quiz_freed", "quiz_path")  # the question's widgets


def quiz_box(run: Run, cycle: int | None, phase: str) -> None:
    """Beside the stage (`stage`): ask at the verify phase of a cycle not yet past it, nothing chosen
    beforehand. From the accept phase on, the answer about the accepted count; the rollback answers
    and the running score (which would tell whether the rollback guesses were right) only from the
    rollback phase on, in the narrative's type size (`QUIZ_CSS`)."""
    tr = run.traces[cycle] if cycle is not None and phase != "start" else None
    st.html(QUIZ_CSS)
    result = next((q for q in run.quiz if tr is not None and q.cycle == cycle), None)
    if tr is not None and result is None and phase == "verify" and run.revealed == run.view and tr.k > 0:
        _quiz_question(tr, run.id, cycle)
    elif result is not None and reached(phase, "accept"):
        at_end = reached(phase, "rollback")
        shown = result.marks() if at_end else result.marks()[:1]
        rows = " · ".join(f"{'✓' if ok else '✗'} {q}: you said {yours}, it was {real}" for q, yours, real, ok in shown)
        right, asked = quiz.tally(run.quiz)
        score = f" Score over this run: {right}/{asked}." if at_end else " The rest of your answers at the rollback."
        with st.container(border=True, key="quiz_feedback"):
            st.markdown(f"**Quiz** — {rows}.{score}")
    else:
        st.caption("**Quiz**: at each cycle's verify phase, predict here what the target will accept.")


# The feedback as large as the narrative beside it (stage.css `.svs-story`, also in lecture mode), and in
# lecture mode the question's labels and choices too (Streamlit's 14 px is not read from the back row).
QUIZ_CSS = ("<style>.st-key-quiz_feedback p { font-size: 16px; line-height: 1.5; } .stApp:has(.svs-lecture) "
            ".st-key-quiz_feedback p { font-size: clamp(17px, 1.95vh, 21px); line-height: 1.35; } "
            ".stApp:has(.svs-lecture) .st-key-quiz_form :is(p, label, input, [data-baseweb='select'] span, button) "
            "{ font-size: clamp(17px, 1.95vh, 21px); line-height: 1.3; }</style>")


def _quiz_question(tr: Any, run_id: int, cycle: int) -> None:
    """The question for `cycle`: no answer chosen beforehand (a question's answers never carry over
    to the next one), locked in only once one is chosen."""
    ss = st.session_state
    if ss.get("_quiz_for") != (run_id, cycle):
        for key in QUIZ_ANSWERS:
            ss.pop(key, None)
        ss._quiz_for = (run_id, cycle)
    truth = quiz.truth(tr)
    with st.container(border=True, key="quiz_form"):
        st.markdown("**Predict, then reveal** — the target has scored the drafts; what happens next?")
        if tr.tree is not None:  # a tree: which root-to-node path wins (labels only: no trace kept)
            labels = truth.path_labels
            answer = st.selectbox("Which path will the target accept?", list(range(len(labels))), key="quiz_path",
                                  format_func=labels.__getitem__, index=None, placeholder="Choose a path…")
        else:
            answer = st.radio("Drafts accepted", list(range(tr.k + 1)), key="quiz_accepted", horizontal=True,
                              index=None)
            st.multiselect("Positions the rollback drops (target cache)", truth.candidates, key="quiz_dropped")
        if truth.candidate_blocks:
            st.multiselect("Blocks returned to the pool", truth.candidate_blocks, key="quiz_freed")
        st.button("Lock in and reveal", key="quiz_submit", on_click=on_quiz_submit, args=(cycle,), type="primary",
                  disabled=answer is None, help="Choose an answer first" if answer is None else None)


def history_slider(run: Run) -> None:
    if run.revealed == 0:
        return
    # Labels made now: Streamlit keeps a widget's format_func after the run, and one closing over
    # `run` would keep its decoder (the KV caches) alive after an idle session is parked.
    labels = [step_label(step, run, PHASE_TITLES) for step in range(run.revealed + 1)]
    # A new key for every step the server shows: the browser may send back the slider's old value
    # with a rerun the stage component asked for before the new slider arrived, and that stale value
    # must not read as the user seeking back (it goes to the old key, which no longer exists).
    key = f"{HISTORY}-{run.id}-{run.view}-{workspace().stage_seq}"
    st.select_slider("History (every revealed phase of every cycle)", options=list(range(run.revealed + 1)),
                     value=run.view, format_func=labels.__getitem__, key=key, on_change=on_history,
                     args=(key, run.view))


def messages(ws: Any) -> None:
    if ws.error:
        st.error(ws.error, icon=":material/error:")
    if ws.waited_note:
        note, ws.waited_note = ws.waited_note, None
        st.caption(note)
    if ws.finished_note:
        if st.session_state.get("lecture"):  # a banner would move the stage: a toast, once
            note, ws.finished_note = ws.finished_note, None
            st.toast(note, icon=":material/flag:", duration="long")
        else:
            st.warning(ws.finished_note, icon=":material/flag:")


def notices(run: Run) -> None:
    """The run's notices ("New run: the prompt changed", a scenario's lesson): banners above the
    buttons, or in lecture mode toasts, each once (a banner there pushed the stage down all run)."""
    ss = st.session_state
    if not ss.get("lecture"):
        for note in run.notices:
            st.info(note, icon=":material/info:")
        return
    if run.notices and ss.get("_toasted") != (run.id, run.notices):
        ss._toasted = (run.id, run.notices)
        for note in run.notices:
            st.toast(note, icon=":material/info:", duration="long")


def stage() -> None:
    """The fragment body: notes, status, picture, narrative, strip, quiz."""
    ss = st.session_state
    ws = workspace()
    if take_full_run_request() or ws.run is None:
        st.rerun(scope="app")
    page = bool(ss.get("_full_run"))  # this run draws the whole page (the history slider too)
    if ws.playing and not page:
        on_next_phase()
        run = ws.run
        done = run.finished and run.view == run.revealed == end_of(len(run.traces))
        if ws.error or ws.finished_note or done:
            ws.playing = False
            st.rerun(scope="app")
        if ws.whatif_spent or stage_component.tabs_follow():
            # The sidebar (the what-if toggle switched itself off), or the open tabs, follow the step.
            st.rerun(scope="app")
    ss._full_run = False
    # The notes above the stage go into a container drawn first and filled after the stage, so the
    # stage's data is the run's first message (the browser renders the page once per message), and
    # always drawn, so the component keeps its place in the page (a moved component is remounted).
    top = st.container()
    run = ws.run
    cycle, phase = view_of(run.view, run)
    lecture = bool(ss.get("lecture"))
    compare = compare_settings()
    view = PageView(
        lecture=lecture, max_rows=LECTURE_ROWS if lecture else STAGE_ROWS, proposer_label=proposer_label(run),
        suffix=status_suffix(run), compare=compare_timeline(run, compare) if compare else None,
        quiz=bool(ss.get("quiz")), tabs=stage_component.tabs_follow(), live=ws.live is not None,
    )  # fmt: skip
    # The quiz sits beside the stage, where its question is seen with the verdicts it asks about.
    # (Switching the quiz on moves the stage into a column: mounted afresh once, then it stays there.)
    # In lecture mode the picture keeps more of the width: at a quarter the quiz squeezed it, and the draft
    # cards, whose q and p the question asks about, fell off the bottom of a 720 px screen.
    ratio = [4, 1] if lecture else [3, 1]
    stage_col, quiz_col = st.columns(ratio, gap="medium") if ss.get("quiz") else (None, None)
    with stage_col if stage_col is not None else contextlib.nullcontext():
        stage_component.show(view, page)
    with top:
        if ws.reset_asked is run:
            reset_question(run)
        messages(ws)
        if compare and run.traces:
            st.markdown(compare_title(compare) + " — the second picture")
    if quiz_col is not None:
        with quiz_col:
            quiz_box(run, cycle, phase)


def run_stage(after: Any = None) -> None:
    """The buttons, the stage as a fragment (while playing it re-runs itself on a timer), the
    history slider, then `after` (the tabs, which follow the phase shown).

    Only the stage is in the fragment: a fragment run re-sends every element it draws, and each
    payload the stage receives is a fragment run. The buttons change only with a whole-page run
    (Play, Reset, a new run); the slider is drawn again by every whole-page run, which the stage asks
    for once stepping has paused (`stage_protocol`: a report with `pause`); open tabs follow every
    step (`stage_component.tabs_follow`)."""
    ws = workspace()
    button_row(ws.run)
    st.session_state._full_run = True
    run_every = SPEEDS.get(st.session_state.get("speed"), 1.0) if ws.playing else None  # Play steps on a timer
    st.fragment(run_every=run_every)(stage)()
    run = workspace().run
    history_slider(run)
    if after is not None:
        cycle, phase = view_of(run.view, run)
        after(run, cycle, phase)
