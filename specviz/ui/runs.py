"""The sidebar's runs panel (`runs_panel`), outside the stage fragment, so stepping never redraws it.

* **Run list.** A restart setting starts a new run; the earlier ones stay selectable, their decoders
  parked, and showing an earlier live run puts its settings back in the sidebar.
* **Open a run file** (the Export tab's, or the CLI's `--json` traces): every view works with no
  model loaded (`specviz.runfile`).
* **Compare cache layouts.** A cycle's decisions do not depend on the layout, only its bookkeeping
  does: the run replayed into another one (`specviz.replay`) is drawn beside it at the same phase.
* **Scenario gallery** (`specviz.scenarios`): one click sets the sidebar and runs up to the cycle.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import streamlit as st

from ..config import LAYOUTS, POLICIES
from ..errors import SpecvizError
from ..proposers import registry
from ..replay import replay_run
from ..runfile import MAX_RUN_BYTES, RunFileError, RunRecord, load_run, record_run
from ..scenarios import Scenario, load_scenarios
from ..server import ServerSettings
from ..viz.stage_data import Timeline
from . import sidebar
from .session import request_full_run, workspace
from .state import Run

# ---------------------------------------------------------------- runs <-> run files -----------


def record_of(run: Run) -> RunRecord:
    """A run as a run file's record (every token text included: it draws with no tokenizer)."""
    return record_run(**record_fields(run))


def record_fields(run: Run) -> dict[str, Any]:
    """What `record_run` needs of a run, as plain values (no decoder), which a download button keeps
    until it is clicked: the record is built then, not on every script run."""
    return dict(
        title=run.title, pair_description=run.pair_description or _pair_text(run), proposer=run.proposer,
        config=run.dec.config if run.dec is not None else run.config, prompt_text=run.prompt_text, chat=run.chat,
        prompt_ids=run.prompt_ids, prefill=run.prefill, traces=run.traces, token_text=run.texts,
        baseline_ms_per_token=run.baseline_ms_per_token, max_context=run.max_context, cost_law=run.law,
        polls=run.polls,
    )  # fmt: skip


def run_of(record: RunRecord, run_id: int, source: str, title: str | None = None) -> Run:
    """A recorded run to step through: nothing revealed yet, no model."""
    return Run(
        id=run_id, title=title or record.title, source=source,  # type: ignore[arg-type]
        restart_key=None,  # type: ignore[arg-type]  # adopts the sidebar when shown (app.showing_recording)
        config=record.config, prompt_ids=tuple(record.prompt_ids), prefill=record.prefill, texts=record.token_text,
        prompt_text=record.prompt_text, chat=record.chat, pair_description=record.pair,
        traces=tuple(record.traces), baseline_ms_per_token=record.baseline_ms_per_token,
        max_context=record.max_context, cost_law=record.cost_law, polls=record.polls,
    )  # fmt: skip


def _pair_text(run: Run) -> str:
    """The pair in words for a run file: the target's name and who proposed."""
    if run.pair is None:
        return ""
    who = run.pair.draft_name if registry.get(run.proposer).needs == "draft" else run.proposer  # the model it ran
    return f"{run.pair.target_name} + {who}"


def on_open_file() -> None:
    """The uploader's callback: the file becomes a new run, shown at once."""
    upload = st.session_state.get("run_file")
    if upload is None:
        return
    ws = workspace()
    try:
        ServerSettings.load().check_upload(ws.uploads)  # a classroom's count of run files per page
        ws.uploads += 1
        if upload.size > MAX_RUN_BYTES:  # refused before it is read or parsed (the browser checks it too)
            raise RunFileError(f"this file is {upload.size / 2**20:.1f} MB; a run file may be at most "
                               f"{MAX_RUN_BYTES // 2**20} MB")
        record = load_run(upload.getvalue())  # validated whole (specviz.run_schema) before it becomes a run
    except SpecvizError as exc:
        ws.error = f"Could not open {upload.name}: {exc}"
        return
    with ws.lock:
        ws.add(run_of(record, ws.new_id(), "imported", title=record.title or upload.name))
        ws.error, ws.playing = None, False
        st.session_state.pop("_force_new_run", None)


# ---------------------------------------------------------------- run list ----------------------


def on_select(run_id: int) -> None:
    ws = workspace()
    with ws.lock:
        try:
            chosen = ws.select(run_id)
        except SpecvizError as exc:
            ws.error = str(exc)
            return
        ws.playing, ws.error, ws.finished_note = False, None, None
        request_full_run()
        if chosen.live and chosen.widgets:
            sidebar.restore_widgets(chosen.widgets)  # its settings, so the sidebar matches the run
        elif not chosen.live:
            ws.run = dataclasses.replace(chosen, restart_key=None)


def on_live_again() -> None:
    st.session_state._force_new_run = True
    request_full_run()


def run_list(run: Run | None) -> None:
    for r in reversed(workspace().runs()):
        shown = r is run
        label = ("▶ " if shown else "") + r.label(count=not shown) + ("" if r.live else f" · {r.source}, no model")
        if shown:
            st.markdown(f"**{label}**")
        else:
            st.button(label, key=f"show_run_{r.id}", on_click=on_select, args=(r.id,), width="stretch",
                      help="Show this run again (a live run's settings go back into the sidebar)")
    if run is not None and not run.live:
        st.button("Start a live run from the sidebar's settings", key="live_again", on_click=on_live_again)
    st.file_uploader(
        "Open a run file (JSON) — no model needed", type=["json"], key="run_file", on_change=on_open_file,
        max_upload_size=MAX_RUN_BYTES // 2**20,
        help="A run exported from the Export tab (or traces from `python -m specviz walk --json`). "
        "Every view works without loading a model.",
    )  # fmt: skip


# ---------------------------------------------------------------- side-by-side replay ---------


def compare_controls(run: Run | None) -> None:
    st.caption("The same cycles replayed into another cache layout, drawn beside the real one (under it on narrow "
               "screens) at the same phase.")
    st.toggle("Compare side by side", key="compare_on")
    st.radio("Layout", LAYOUTS, key="compare_layout", horizontal=True)
    page = run.config.page_size if run is not None else 16
    st.select_slider("Page size", sidebar.PAGE_SIZES, key="compare_page", value=page)
    st.radio("Policy", POLICIES, key="compare_policy", horizontal=True)


def compare_settings() -> tuple[str, int, str] | None:
    ss = st.session_state
    if not ss.get("compare_on"):
        return None
    return (ss.get("compare_layout", "contiguous"), int(ss.get("compare_page", 16)), ss.get("compare_policy", "free"))


def compare_title(settings: tuple[str, int, str]) -> str:
    layout, page, policy = settings
    what = f"paged, page size {page}, policy “{policy}”" if layout == "paged" else "contiguous"
    return f"**The same cycles replayed into a {what} cache** — same tokens, same verdicts, other bookkeeping"


# ---------------------------------------------------------------- scenario gallery ------------


def on_scenario(scenario_id: str) -> None:
    """Set the sidebar to the scenario's settings and ask for a fresh run up to its cycle."""
    scenario = next(s for s in load_scenarios() if s.id == scenario_id)
    cfg = scenario.config()  # the app's defaults where the scenario names no value
    values = dict(
        pair_kind="default", prompt=scenario.prompt, chat=scenario.chat, k=cfg.k, temperature=cfg.temperature,
        seed=cfg.seed, layout=cfg.cache_layout, page_size=cfg.page_size, policy=cfg.free_policy,
        max_new=cfg.max_new_tokens, proposer=cfg.proposer, top_k=cfg.top_k, top_p=cfg.top_p,
        tree_width=cfg.tree_width, tree_nodes=cfg.tree_nodes, num_blocks=0, max_context=cfg.max_context,
        whatif=False, dtype="float32",  # scenarios are found and checked on the float32 pair
    )  # fmt: skip
    sidebar.restore_widgets(values)
    ss = st.session_state
    ss._pending_scenario, ss._force_new_run = scenario, True
    workspace().playing = False
    request_full_run()


def take_pending_scenario() -> Scenario | None:
    return st.session_state.pop("_pending_scenario", None)


def gallery() -> None:
    st.caption("Exact runs on the default pair, found by seed — nothing is forced. One click loads one.")
    try:
        scenarios = load_scenarios()
    except SpecvizError as exc:
        st.error(f"The scenario file cannot be read: {exc}")
        return
    for s in scenarios:
        settings = f"seed {s.seed}, K = {s.k}, T = {s.temperature:g}, shown at cycle {s.cycle + 1}"
        st.button(s.title, key=f"scenario_{s.id}", on_click=on_scenario, args=(s.id,), width="stretch",
                  help=f"{s.lesson} ({settings})")


def runs_panel(run: Run | None) -> None:
    """The sidebar's runs section: scenarios, this session's runs (and run files), comparison.
    In the sidebar, outside the stage fragment: a click on Next phase does not redraw it."""
    fresh = run is None or not run.traces
    with st.expander("Scenario gallery", icon=":material/collections_bookmark:", expanded=fresh):
        gallery()
    with st.expander(f"Runs ({len(workspace().runs())}) and run files", icon=":material/history:"):
        run_list(run)
    with st.expander("Compare cache layouts", icon=":material/compare:", expanded=bool(compare_settings())):
        compare_controls(run)


def compare_timeline(run: Run, settings: tuple[str, int, str]) -> Timeline | None:
    """The run replayed into `settings`, for the stage's second picture at the same steps (None when it
    cannot be drawn: the stage shows why). Memoised per run, cycle count and settings; only the run's
    own cycles: a prefetched one is replayed once adopted."""
    if not run.traces:
        return None
    key = (run.id, len(run.traces), settings)
    memo = st.session_state.get("_compare_timeline")
    if memo is None or memo[0] != key:
        layout, page, policy = settings
        try:
            other = replay_run(record_of(run), cache_layout=layout, page_size=page, free_policy=policy)
        except SpecvizError as exc:
            st.warning(f"The replay into {layout} could not be drawn: {exc}")
            return None
        memo = (key, Timeline(prompt_ids=tuple(other.prompt_ids), prefill=other.prefill, traces=tuple(other.traces),
                              texts=other.token_text, proposer=other.config.proposer))
        st.session_state._compare_timeline = memo
    return memo[1]
