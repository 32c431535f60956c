"""The stage as a Streamlit custom component (components v2): the browser steps, the server computes.

Every phase of a cycle is known the moment the cycle is computed, so a server round trip per
phase is waste. The component is mounted once, with a fixed key, straight into the page
(`isolate_styles=False`: the page's KV stylesheet applies and tests find `.svkv` with a plain
query). It receives the steps around the one shown (`viz.stage_data.window`) and steps through
them itself — on the page's Next phase / Next cycle / Back buttons and the arrow keys — patching
the picture in place so the nodes transition and glide (the stage core, `viz/stage_js.py`). It tells the
server where it is only when that matters, and asks for the steps it lacks (`stage_protocol`).

This module is the Streamlit side: mounting, the trigger's callback, the session's `Channel` in
session state, and the thread that computes a new run's cycles ahead while the browser draws the
page. What a message does and what the browser is sent is `stage_protocol`, shared with the
stage's own route (`stage_route`).
"""

from __future__ import annotations

import threading
import time
from functools import cache
from typing import Any

import streamlit as st

from ..viz import stage_js
from . import stage_protocol, stage_route
from .session import request_full_run, workspace
from .state import Workspace

KEY = "stage"
NAME = "specviz_stage"
CHANNEL = "_stage_channel"  # the session's `Channel`
SERVED = "_stage_served"  # when the last event's callback started and ended (epoch ms; the latency bench)


@cache
def _component() -> Any:
    return st.components.v2.component(NAME, css=stage_js.stage_css(), js=stage_js.app_js(), isolate_styles=False)


def channel() -> stage_protocol.Channel:
    """This session's channel (made on first use, and then reachable by the route)."""
    ch = st.session_state.get(CHANNEL)
    if ch is None:
        ch = st.session_state[CHANNEL] = stage_protocol.Channel(workspace())
        stage_route.register(ch)
    return ch


def on_event() -> None:
    """The component's `event` trigger: a report of where it is, or a step it asks for."""
    state = st.session_state.get(KEY)
    event = stage_protocol.parse(state.get("event") if hasattr(state, "get") else getattr(state, "event", None))
    if event is None:
        return
    start = time.time() * 1000
    try:
        if stage_protocol.handle(channel(), event):
            request_full_run()
    finally:
        st.session_state[SERVED] = stage_protocol.served_stamp(event, start)


def tabs_follow() -> bool:
    """Whether the tabs below the stage are open (not in lecture mode, which has none): they follow
    the phase shown, so the stage reports every step and each report re-runs the whole page."""
    ss = st.session_state
    return bool(ss.get("more")) and not ss.get("lecture")


def show(view: stage_protocol.PageView, page: bool) -> None:
    """Mount (or update) the stage with this script run's payload, for the page's current `view`."""
    ch = channel()
    ch.look(view)
    data = stage_protocol.payload(ch, route=stage_route.address(), page=page, served=st.session_state.pop(SERVED, None))
    _component()(key=KEY, data=data, on_event_change=on_event)


def prefetch_in_background(ws: Workspace, run_id: int) -> None:
    """Start computing a new run's cycles ahead now, in a thread of its own, while the browser
    draws the page (a new run is looked at: someone just opened the page or changed a setting), so
    they do not queue behind other pages' work once the page asks. Only where a browser draws the
    page (`stage_route.serving`): under AppTest a script run is all there is, and a thread computing
    beside it would make what it shows depend on timing."""
    if stage_route.serving():
        threading.Thread(target=stage_protocol.prefetch_next, args=(ws, run_id), name="specviz-prefetch",
                         daemon=True).start()
