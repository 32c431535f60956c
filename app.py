"""specviz — watch exact speculative decoding happen, one phase at a time.

    streamlit run app.py                 # the embedded default pair (SmolLM2-135M-Instruct + draft)
    SPECVIZ_PAIR=tiny streamlit run app.py   # a tiny random pair: instant start, for tests and dev
    SPECVIZ_PAIR=custom SPECVIZ_TARGET=dir-or-id SPECVIZ_DRAFT=dir-or-id streamlit run app.py
    SPECVIZ_THREADS=N                        # torch threads (default: the cores shared among decoding slots)
    SPECVIZ_CLASSROOM=1                      # lock a shared server down (specviz.server; also .streamlit/specviz.toml)
    SPECVIZ_MAX_DECODING=N, SPECVIZ_IDLE_SECONDS=S   # sessions decoding at once; release idle caches after S s
    SPECVIZ_TINY_EOS=1                       # the tiny pair can emit end-of-text (tests of how a text ends)

This file is the page layout only. The state machine of runs lives in `specviz.ui.state` (no
Streamlit), the controls in `specviz.ui.sidebar`, the stage (buttons, KV picture, narrative,
token strip, quiz) in `specviz.ui.stage`, one module per tab, and the shared-server machinery
in `specviz.ui.actions` and `specviz.ui.session`. All math lives in the engine (`specviz.SpeculativeDecoder` computes a
whole cycle per `step()` and returns a `CycleTrace`); all pictures are pure functions of traces
in `specviz.viz`; all explanations come from `specviz.narrative`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# pandas is imported before any session draws a table: Streamlit imports it lazily on first use, and
# two sessions drawing their first table at once must not meet a half-imported module.
import pandas  # noqa: F401
import streamlit as st

from specviz import heap, narrative, parking
from specviz.config import MAX_K
from specviz.errors import SpecvizError
from specviz.prompting import encode_prompt
from specviz.server import ServerSettings
from specviz.ui import actions, fork, live_panel, live_route, session, sidebar, stage, stage_component, stage_route
from specviz.ui.runs import runs_panel, take_pending_scenario
from specviz.ui.state import Run, prefetch, run_to_cycle, start_live_run, sync_config
from specviz.ui.tab_charts import charts_tab
from specviz.ui.tab_export import export_tab
from specviz.ui.tab_lab import lab_tab
from specviz.ui.tab_stats import stats_tab
from specviz.viz import kv_html

# The secondary views, inside the "More views" expander. While it is closed nothing below the stage
# is drawn on a click; open, the open tab follows the phase.
TABS = {
    "charts": ":material/bar_chart_4_bars: Distributions",
    "stats": ":material/bar_chart: Statistics",
    "lab": ":material/target: Exactness lab",
    "myths": ":material/report: Common misconceptions",
    "export": ":material/download: Export & import",
}

# The page's icon, sent inline (an SVG file becomes a data: URL): a `:material/…:` icon is fetched
# from Google's font CDN on every page, which an offline classroom cannot reach.
ICON = Path(__file__).resolve().parent / "assets" / "icon.svg"

MYTHS_INTRO = "The classic walkthrough of the cache bookkeeping gets these wrong. specviz shows the precise version:"

# The stage must sit above the fold at 1440x900: Streamlit's default top padding (6 rem) is halved.
# In lecture mode (no caption above the buttons) the buttons sit in Streamlit's header band: the
# header and everything in it let clicks through (its toolbar sets `pointer-events: auto` on itself,
# so the header's own `none` is not enough: it took the stage buttons' clicks), but for the toggle
# that brings the sidebar back; its Deploy button and ⋮ menu are not for a projector. The main
# column keeps narrow margins (the stage collapses the sidebar there: docs/design.md §3, "One
# screen in lecture mode"). The container of everything above the stage (`HEAD`) adds no box of its
# own (no gap when empty).
HEAD = "page_head"
_HEAD_CSS = f"div:has(> .st-key-{HEAD}), .st-key-{HEAD} {{ display: contents; }}"  # and Streamlit's wrapper
COMPACT_PAGE = f"<style>.stMainBlockContainer {{ padding-top: 2.5rem; }} {_HEAD_CSS}</style>"
_BAND = "header[data-testid='stHeader']"
LECTURE_PAGE = ("<style>.stMainBlockContainer { padding: .5rem 3rem 1rem; } "
                f"{_BAND} {{ background: transparent; }} {_BAND}, {_BAND} * {{ pointer-events: none; }} "
                f"{_BAND} [data-testid='stExpandSidebarButton'] {{ pointer-events: auto; }} "
                f"{_BAND} :is([data-testid='stAppDeployButton'], [data-testid='stMainMenu']) {{ display: none; }} "
                f"{_HEAD_CSS}</style>")


def more_views(run: Run, cycle: int | None, phase: str) -> None:
    """The secondary views, below the stage, in a lazy expander of lazy tabs: only the open tab of
    an open expander is computed."""
    if st.session_state.get("lecture"):
        st.caption("Lecture mode shows the stage only: switch it off in the sidebar for the charts and tabs.")
        return
    box = st.expander("More views: distributions, statistics, exactness lab, misconceptions, export", key="more",
                      on_change="rerun", icon=":material/bar_chart:")
    if box.open is False:
        return
    with box:
        tabs(run, cycle, phase)


def tabs(run: Run, cycle: int | None, phase: str) -> None:
    shown = st.tabs(list(TABS.values()), key="tab", on_change="rerun")
    views = dict(zip(TABS, shown, strict=True))
    tr = run.traces[cycle] if cycle is not None else None
    bodies = {
        "charts": lambda: st.session_state.update(_figures=charts_tab(tr, phase)),
        "stats": lambda: stats_tab(run),
        "lab": lambda: lab_tab(run, cycle),
        "myths": lambda: st.markdown(MYTHS_INTRO + "\n\n" + narrative.misconceptions_markdown()),
        "export": lambda: export_tab(run, cycle, phase),
    }
    for name, tab in views.items():
        if tab.open is not False:  # None: a test harness without tab state renders every tab
            with tab:
                bodies[name]()


def ensure_run(controls: sidebar.Controls, pair: Any, settings: ServerSettings) -> bool:
    """Start a new run when a restart setting changed (the old one stays in the run list);
    rebuild a parked decoder; apply live settings. False when no run can be shown."""
    ss = st.session_state
    ws = session.workspace()
    key = controls.restart_key()
    run = ws.run
    forced = ss.pop("_force_new_run", False)  # popped first: a changed key must not leave it for the next run
    if run is not None and not controls.prompt.strip():  # nothing to start: the stage keeps its run, and the
        return True  # sidebar says why beside the prompt (`sidebar._prompt_controls`)
    if run is None or run.restart_key != key or forced:
        notice = ss.pop("reset_notice", "")
        if run is not None:
            changed = ", ".join(sidebar.changed_settings(run.restart_key, key))
            kept = f" Run #{run.id} stays in the run list." if run.traces else ""
            # Nothing changed: "Start a live run" from a recording (or a scenario with these settings).
            what = f"New run: the {changed} changed." if changed else "New live run from the sidebar's settings."
            notice = what + kept
        try:
            settings.check_prompt_text(controls.prompt)  # before tokenizing: a huge text is already work
            ids = encode_prompt(pair.tokenizer, controls.prompt, controls.chat)
            settings.check_prompt_ids(ids)
            # One turn for a decoding slot: the prefill, then the first cycle (computed ahead, so the
            # first click is as quick as the others; the slots are re-entrant, nothing waits twice).
            with session.decoding_slot():
                new = start_live_run(
                    ws.new_id(), controls.prompt.strip().replace("\n", " ")[:32] or "run", key, pair,
                    controls.config, ids, slot=session.decoding_slot, session_texts=ws.session_texts,
                    widgets=sidebar.widget_values(),
                    prompt_text=controls.prompt, chat=controls.chat, notices=(notice,) if notice else (),
                )  # fmt: skip
                new = first_cycle_ahead(fork.start(_scenario_start(new), session.decoding_slot))
        except SpecvizError as exc:
            ws.playing = False
            st.error(f"Could not start: {exc}", icon=":material/error:")
            return False
        ws.add(new)
        ws.error = None
        stage_component.prefetch_in_background(ws, new.id)
    elif run.parked is not None:  # idle for a while: rebuild the released decoder
        try:
            actions.wake_shown(ws, session.decoding_slot)
        except SpecvizError as exc:  # e.g. the server stayed busy: the history is still there
            st.error(f"Could not resume: {exc}", icon=":material/error:")
            return False
    if ws.run.dec is not None:
        try:
            sync_config(ws.run, controls.config, sidebar.LIVE)
        except SpecvizError as exc:
            ws.error = str(exc)
    return True


def showing_recording(controls: sidebar.Controls | None) -> bool:
    """A recorded run (imported or replayed) is shown and no restart setting changed since it was
    opened: it is drawn with no model at all (the pair is not even loaded)."""
    ws = session.workspace()
    run = ws.run
    if run is None or run.live or controls is None or st.session_state.get("_force_new_run"):
        return False
    key = sidebar.key_without_proposer(controls.restart_key())
    if run.restart_key is None:  # just opened: it adopts the sidebar as it is
        ws.run = run = dataclasses.replace(run, restart_key=key)
    return run.restart_key == key


def first_cycle_ahead(run: Run) -> Run:
    """A new run's first cycle, computed ahead (`state.prefetch`) while its prefill's decoding slot
    is held, so the first click does not queue behind other pages' prefills. A failure here is not
    the run's: the click that needs the cycle computes it and says what went wrong."""
    if run.traces:
        return run  # a scenario ran to its cycle
    try:
        return prefetch(run)
    except Exception:  # noqa: BLE001 - reported by the click that asks for the cycle
        return run


def _scenario_start(run: Run) -> Run:
    """A gallery scenario just chose these settings: run up to its cycle and say what to watch."""
    scenario = take_pending_scenario()
    if scenario is None:
        return run
    run = run_to_cycle(run, scenario.cycle, session.decoding_slot)
    lesson = f"Scenario **{scenario.title}** — cycle {scenario.cycle + 1}: {scenario.lesson}"  # stepping: the stage
    return dataclasses.replace(run, title=scenario.title, notices=(lesson,))


def main() -> None:
    st.set_page_config(page_title="specviz — speculative decoding, exactly", page_icon=str(ICON),
                       layout="wide")
    try:
        settings = ServerSettings.load()
    except SpecvizError as exc:  # a typo in a server setting must not open a locked-down server
        st.error(f"This server's specviz settings are invalid: {exc}", icon=":material/error:")
        return
    if settings.classroom:  # a traceback names the server's paths: students see the error's words only
        st.set_option("client.showErrorDetails", "none")
    session.configure_threads(settings)
    ws = session.open_workspace(settings)  # first: a reloaded page's settings come back before the widgets are drawn
    if ws is None:  # a classroom server at its bound on open pages: it said so
        return
    sidebar.init_state()
    fork_note = fork.take()  # a student's own try of a live lecture's cycle (specviz.ui.fork)
    registry = parking.shared_registry()
    registry.touch(ws)
    released = registry.sweep(settings.idle_seconds, session.release_idle)  # sessions idle too long free their caches
    heap.settle_once()  # Streamlit's collection after each run walks only what runs made (specviz.heap)
    heap.settle_if_sessions_left(len(registry), released)
    if ws.whatif_spent:  # before the toggle is drawn: its value can only change now
        st.session_state.whatif, ws.whatif_spent = False, False
    limit_notes = sidebar.apply_limits(settings) + ([fork_note] if fork_note else [])
    runs_slot = st.sidebar.container()  # filled last: it lists the run this script run shows
    controls = sidebar.sidebar(settings, stage.on_walkthrough)
    live_panel.panel(session.workspace().run)
    try:
        page(settings, controls, limit_notes)
        live_panel.results_if_revealed()
    finally:
        with runs_slot:
            runs_panel(session.workspace().run)
        session.workspace().widgets = sidebar.page_settings()  # what a reload of this page starts from


def page(settings: ServerSettings, controls: sidebar.Controls | None, limit_notes: list[str]) -> None:
    """The main column: the header, then the run the sidebar asks for (or a recording).

    Everything above the stage that varies goes into one container, `head`, however many elements
    it holds this run (notes, a wait for a decoding slot, errors): the stage is then always the same
    child of the page (a component that moves to another place in the page is mounted afresh)."""
    ws = session.workspace()
    st.html((LECTURE_PAGE if st.session_state.get("lecture") else COMPACT_PAGE) + kv_html.stylesheet(MAX_K))
    head = st.container(key=HEAD)
    with head:
        if not st.session_state.get("lecture"):  # lecture mode: the stage alone, on one screen
            st.caption("**Speculative decoding, exactly** — a proposer guesses K tokens, the target checks them in "
                       "one pass, and a rejection test keeps the output exactly the target's. Keys: → phase · "
                       "Shift+→ cycle · ← back · P play")
        for note in limit_notes:
            st.warning(note, icon=":material/school:")
    if showing_recording(controls):
        _show(ws, head)
        return
    with head:
        pair = _pair_for(settings, controls)
    if pair is None:
        stage.button_row(None)
        return
    with controls.proposer_slot:
        proposer = sidebar.proposer_control(pair)
    controls = dataclasses.replace(controls, config=controls.config.replace(proposer=proposer))
    with ws.lock, head:
        started = ensure_run(controls, pair, settings)
    if not started:
        stage.button_row(None)
        return
    _show(ws, head)


def _show(ws: Any, head: Any) -> None:
    with head:
        stage.notices(ws.run)  # toasts in lecture mode: nothing above the stage moves it
    stage.run_stage(after=more_views)
    live_panel.recorded(ws.run)  # a recorded live lecture: the class's answers


def _pair_for(settings: ServerSettings, controls: sidebar.Controls | None) -> Any:
    """The loaded pair the controls ask for, or None with the reason shown."""
    if controls is None:
        return None
    try:
        settings.check_pair(controls.kind)  # behind the radio's options: a custom pair never loads here
    except SpecvizError as exc:
        st.error(str(exc), icon=":material/error:")
        return None
    if controls.kind == "custom" and not (controls.target and controls.draft):
        st.info("Enter a target and a draft (hub ids or local directories) in the sidebar.")
        return None
    return session.load_pair_with_progress(controls.kind, controls.target, controls.draft, controls.dtype)


if __name__ == "__main__":  # streamlit runs the script as __main__; importing it (tests) runs nothing
    main()
else:
    # `streamlit run app.py` finds this st.App and serves it: this file as the page, plus the stage's
    # own route (specviz.ui.stage_route: the browser fetches cycles without a script run).
    app = st.App(__file__, routes=stage_route.routes() + live_route.routes(stage_route.base_path()),
                 lifespan=stage_route.lifespan)
