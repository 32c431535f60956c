"""The lecturer's side of a live lecture, in the sidebar: start it, show the room its code, see the
room at a glance, ask a question at the verify phase, reveal it, end it.

The room itself and the students' pages are elsewhere (`specviz.room`, `ui/live`, `ui/live_route`,
`viz/follower`). The glance is a fragment that runs every second: the counts of a poll reach the
lecturer's screen within that, and the room knows from it that the lecturer is still there.
On **Reveal** the lecturer's stage moves on one phase (the accept phase shows the verdicts) and a
dialog shows the class's answers beside the truth, in type large enough for the back of the room.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import urlsplit

import plotly.graph_objects as go
import streamlit as st

from ..room import Poll, Room, RoomError
from ..viz.markup import esc, label
from . import live, live_route, stage_route
from .runs import record_fields
from .session import act, decoding_slot, workspace
from .state import Run, advance_phase, view_of
from .tab_export import run_file_button

QR_PX = 220  # in the sidebar; the dialog shown to the room doubles it


def join_address(code: str = "") -> str:
    """Where students open the room: this page's host, the route's path (under the server's base path)."""
    url = urlsplit(str(st.context.url or "http://localhost:8501/"))
    base = stage_route.base_path()
    path = (f"/{base}" if base else "") + live_route.PATH
    if not code:
        return f"{url.scheme}://{url.netloc}{path}"
    # Behind the documented nginx (several replicas), the room lives in the lecturer's replica: the
    # address names it, and nginx pins each student's browser there (docker/nginx-sticky.conf).
    replica = (st.context.cookies or {}).get("specviz_replica", "")
    pin = f"?replica={replica}" if re.fullmatch(r"[0-9a-f]{32}", replica) else ""
    return f"{url.scheme}://{url.netloc}{path}/{code}{pin}"


def qr_svg(text: str, px: int) -> str:
    """A QR code of `text` as inline SVG (segno: made here, no outside service)."""
    import segno

    qr = segno.make(text, error="m")
    scale = max(1, px // (qr.symbol_size(border=2)[0]))
    return qr.svg_inline(scale=scale, border=2, dark="#111827", light="#ffffff")


def panel(run: Run | None) -> None:
    """The sidebar's live-lecture section."""
    ws = workspace()
    with st.sidebar.expander("Live lecture", icon=":material/groups:", expanded=ws.live is not None):
        if ws.live is None:
            st.caption("Students follow your stage on their own screens and answer questions before each reveal.")
            if st.button("Start a live lecture", key="live_start", icon=":material/podcasts:"):
                live.start(ws)
                st.rerun(scope="app")
            return
        room = ws.live.room
        st.markdown(f"Room code **{esc(room.code)}** · join at `{join_address()}`")
        st.html(f"<div style='width:{QR_PX}px'>{qr_svg(join_address(room.code), QR_PX)}</div>")
        if st.button("Show the code to the room", key="live_show_code", icon=":material/qr_code_2:"):
            show_code(room.code)
        glance(run)
        if run is not None and run.traces:
            fields = record_fields(dataclasses.replace(run, polls=tuple(room.results(ws.live.key, run.id))))
            run_file_button(st, "Download the lecture (run + the class's answers)", "live_export", fields)
        if st.button("End the live lecture", key="live_end", icon=":material/stop_circle:"):
            live.end(ws)
            st.rerun(scope="app")


@st.dialog("Join the live lecture", width="large")
def show_code(code: str) -> None:
    st.html(f"<div style='display:flex;gap:40px;align-items:center'>{qr_svg(join_address(code), 2 * QR_PX)}"
            f"<div><div style='font-size:72px;font-weight:700;letter-spacing:.15em'>{esc(code)}</div>"
            f"<div style='font-size:24px'>{esc(join_address())}</div></div></div>")


@st.fragment(run_every=1.0)
def glance(run: Run | None) -> None:
    """Who is here, who follows, answers in; the question's buttons (every second)."""
    ws = workspace()
    if st.session_state.pop("live_app_rerun", False):  # a reveal moved the stage: the whole page follows
        st.rerun(scope="app")
    if ws.live is None:
        return
    room, key = ws.live.room, ws.live.key
    try:
        seen = room.glance(key)
    except RoomError as exc:
        st.warning(str(exc), icon=":material/warning:")
        return
    st.markdown(f"**{seen['joined']}** joined · **{seen['following']}** following · **{seen['branched']}** "
                "looking elsewhere")
    run = ws.run
    poll = room.polls[-1] if room.polls else None
    if poll is not None and not poll.revealed:
        st.markdown(f"Question: *{esc(poll.question.text)}* — **{len(poll.answers)}** answered")
        st.button("Reveal", key="live_reveal", type="primary", icon=":material/visibility:", on_click=reveal,
                  args=(room, key, poll))
        return
    trace = question_trace(run)
    if trace is not None and (poll is None or poll.cycle != trace.cycle):
        st.button("Ask the class: what will the target accept?", key="live_ask", icon=":material/quiz:",
                  on_click=lambda: room.open_poll(key, trace))
    elif trace is None:
        st.caption("At a cycle's verify phase you can ask the class what the target will accept.")
    if poll is not None and poll.revealed and st.button("Show the last question's answers", key="live_results"):
        results(poll.view(lecturer=True))


def question_trace(run: Run | None) -> Any:
    """The cycle a question can be asked about: the one at its verify phase on the lecturer's stage."""
    if run is None or not run.traces:
        return None
    cycle, phase = view_of(run.view, run)
    if phase != "verify" or cycle is None or cycle >= len(run.traces) or run.traces[cycle].k == 0:
        return None
    return run.traces[cycle]


def reveal(room: Room, key: str, poll: Poll) -> None:
    """Reveal the poll, move the stage on to the verdicts, and show the class's answers."""
    room.reveal(key, poll.number)
    act(lambda r: advance_phase(r, decoding_slot))
    st.session_state.live_reveal_shown = poll.number
    st.session_state.live_app_rerun = True


def results_if_revealed() -> None:
    """The dialog with the class's answers, once, right after a reveal (called by the page)."""
    ws = workspace()
    number = st.session_state.pop("live_reveal_shown", None)
    if ws.live is None or number is None or number > len(ws.live.room.polls):
        return
    results(ws.live.room.polls[number - 1].view(lecturer=True))


def recorded(run: Run | None) -> None:
    """A recorded lecture's questions with the class's answers, below its stage (a run file that
    carries them: `RunRecord.polls`)."""
    if run is None or not run.polls:
        return
    with st.expander(f"The class's answers: {len(run.polls)} question(s) asked in this lecture", expanded=True,
                     icon=":material/groups:"):
        for i, poll in enumerate(run.polls):
            st.plotly_chart(figure(poll | {"text": f"Cycle {poll['cycle'] + 1}: {poll['text']}"}), width="stretch",
                            config={"displayModeBar": False}, key=f"live_recorded_{run.id}_{i}")


@st.dialog("The class's answers", width="large")
def results(poll: dict[str, Any]) -> None:
    st.plotly_chart(figure(poll), width="stretch", config={"displayModeBar": False})


def figure(poll: dict[str, Any]) -> go.Figure:
    """The class's answers per option, the true one in green, numbers on the bars (readable from the back)."""
    counts, truth = poll.get("counts", [0] * len(poll["options"])), poll.get("truth")
    colors = ["#009e73" if i == truth else "#0072b2" for i in range(len(counts))]
    names = [label(o) + (" ✓" if i == truth else "") for i, o in enumerate(poll["options"])]
    fig = go.Figure(go.Bar(x=names, y=counts, marker_color=colors, text=counts, textposition="outside",
                           textfont={"size": 28}))
    fig.update_layout(title={"text": label(poll["text"]), "font": {"size": 28}}, font={"size": 24}, height=520,
                      margin={"t": 90, "b": 40, "l": 40, "r": 20}, yaxis={"title": "students", "rangemode": "tozero"},
                      showlegend=False)
    return fig
