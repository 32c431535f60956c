"""The stage's own route (`specviz.ui.stage_route`), without a browser.

* **The same answer as the page's path.** A request posted to the route is carried out by the same
  `stage_protocol.handle` as the trigger's callback, under the workspace's lock: the cycle it
  computes is the one the buttons compute, a request sent twice is carried out once, a report
  fills the cycles computed ahead (`PREFETCH_DEPTH`), and the payload that comes back answers the
  request (`answered`, the new `seq`) with a `version` that grew.
* **What the page must draw comes back as `redraw`**: a paused report (the history slider), an
  action that ended the text.
* **The endpoint** turns away what is not a stage message (400), an unknown session (410: the
  page falls back to its trigger), a session with no run shown (409, a Reset on its way) and an
  oversized body (413); the registry forgets a session's channel when the session is gone; payloads
  name the route only where a process serves it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json

import pytest

import specviz
from specviz.config import DecodeConfig
from specviz.ui import stage_route
from specviz.ui.stage_protocol import Channel, PageView
from specviz.ui.state import PREFETCH_DEPTH, Workspace, advance_cycle, start_live_run
from specviz.viz import stage_data

PROMPT = [3, 9, 4, 12, 7, 1, 30, 22, 5, 8]
VIEW = PageView(lecture=False, max_rows=6, proposer_label="draft model", suffix="", compare=None,
                quiz=False, tabs=False)


@pytest.fixture(scope="module")
def pair():
    return specviz.build_tiny_pair(seed=0)


def channel(pair, **cfg) -> Channel:
    config = DecodeConfig(**{"k": 4, "temperature": 1.0, "page_size": 4, "max_new_tokens": 64, **cfg})
    ws = Workspace()
    ws.run = start_live_run(ws.new_id(), "test", ("key", 1), pair, config, PROMPT)
    ch = Channel(ws, view=VIEW)
    stage_route.register(ch)
    return ch


def essence(tr) -> dict:
    d = tr.to_dict()
    d.pop("timings_ms", None)
    return d


def test_an_asked_cycle_is_the_cycle_the_buttons_compute_and_is_computed_once(pair):
    ch = channel(pair)
    run_id = ch.ws.run.id
    ask = {"kind": "next_cycle", "run": run_id, "step": 0, "target": 5, "req": "m:1"}
    data = stage_route.answer(ch, ask)
    assert data["answered"] == "m:1" and data["view"] == 5 and data["seq"] == 1 and data["version"] >= 1
    assert data["channel"] == ch.token and not data["redraw"]
    step = stage_data.unpack(data)["5"]
    assert "Rollback" in step["title"] and step["kv"]
    button = advance_cycle(channel(pair).ws.run)
    assert essence(ch.ws.run.traces[0]) == essence(button.traces[0])
    shown, version = ch.ws.run, data["version"]
    again = stage_route.answer(ch, ask)  # the same request once more (a resend): nothing happens
    assert ch.ws.run is shown and again["answered"] == "m:1" and again["version"] == version


def test_a_report_fills_the_cycles_ahead_and_leaves_the_step_alone(pair):
    ch = channel(pair)
    run_id = ch.ws.run.id
    stage_route.answer(ch, {"kind": "next_cycle", "run": run_id, "step": 0, "target": 5, "req": "m:1"})
    data = stage_route.answer(ch, {"kind": "view", "run": run_id, "step": 5})  # a report: prefetches too
    assert len(ch.ws.run.ahead_cycles) == PREFETCH_DEPTH and data["view"] == 5 and data["seq"] == 1
    assert {"6", "11", "16"} <= set(data["steps"]) and not data["prefetch"]
    again = stage_route.answer(ch, {"kind": "prefetch", "run": run_id, "step": 5})
    assert again["version"] == data["version"] and len(ch.ws.run.ahead_cycles) == PREFETCH_DEPTH  # nothing to add


def test_what_the_page_must_draw_comes_back_as_redraw(pair):
    ch = channel(pair)
    run_id = ch.ws.run.id
    assert stage_route.answer(ch, {"kind": "view", "run": run_id, "step": 0, "pause": True})["redraw"]
    short = channel(pair, max_new_tokens=1)
    sid = short.ws.run.id
    stage_route.answer(short, {"kind": "next_cycle", "run": sid, "step": 0, "target": 5, "req": "a"})
    ended = stage_route.answer(short, {"kind": "next_cycle", "run": sid, "step": 5, "target": 10, "req": "b"})
    assert ended["redraw"] and short.ws.finished_note and not ended["more"]


def _post(body: bytes) -> tuple[int, dict]:
    """The endpoint called as the web server calls it (an ASGI request with this body)."""
    from starlette.requests import Request

    async def call() -> tuple[int, dict]:
        sent = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict:
            return sent.pop(0)

        scope = {"type": "http", "method": "POST", "path": stage_route.PATH, "headers": [], "query_string": b""}
        response = await stage_route._endpoint(Request(scope, receive))
        return response.status_code, json.loads(response.body)

    return asyncio.run(call())


def test_the_endpoint_answers_a_session_and_turns_away_the_rest(pair):
    ch = channel(pair)
    event = {"kind": "next_cycle", "run": ch.ws.run.id, "step": 0, "target": 5, "req": "m:1"}
    status, data = _post(json.dumps({"token": ch.token, "event": event}).encode())
    assert status == 200 and data["view"] == 5 and data["answered"] == "m:1"
    assert _post(b"not json")[0] == 400
    assert _post(json.dumps({"token": ch.token, "event": {"kind": "explode"}}).encode())[0] == 400
    assert _post(json.dumps({"token": "guess", "event": event}).encode())[0] == 410
    assert _post(b" " * (stage_route.MAX_BODY + 1))[0] == 413
    ch.ws.run = None  # a Reset: the next script run starts the new run
    assert _post(json.dumps({"token": ch.token, "event": event}).encode())[0] == 409


def test_a_gone_session_is_forgotten_and_payloads_name_the_route_only_where_it_is_served(pair, monkeypatch):
    ch = channel(pair)
    token = ch.token
    del ch
    gc.collect()
    assert _post(json.dumps({"token": token, "event": {"kind": "view", "run": 1, "step": 0}}).encode())[0] == 410
    monkeypatch.setattr(stage_route, "_served", None)
    monkeypatch.setattr(stage_route, "_path", stage_route.PATH)

    async def served() -> str | None:  # what payloads name while the server runs
        async with stage_route.lifespan(None):
            return stage_route.address()

    (route,) = stage_route.routes()  # app.py's st.App, built when app.py is imported
    assert route.path == stage_route.PATH and stage_route.address() is None  # nothing served yet: AppTest
    assert asyncio.run(served()) == stage_route.PATH and not stage_route.serving()  # up, then down again
    from streamlit import config

    config.set_option("server.baseUrlPath", "room-3")  # a server behind a path prefix
    try:
        (route,) = stage_route.routes()
    finally:
        config.set_option("server.baseUrlPath", "")
    assert route.path == asyncio.run(served()) == "/room-3" + stage_route.PATH


def test_a_payload_never_says_answered_over_an_older_step(pair, monkeypatch):
    """Built while a request of the same session is carried out in another thread, a payload must not
    pair the request's answer (`answered`, `seq`) with the step before it: the browser would take it as
    the answer and drop the click (bench.load, N = 8)."""
    from specviz.ui.stage_protocol import payload

    ch = channel(pair)
    window = stage_data.window

    def meanwhile(view, tl, ahead):  # the other thread's request completes while this one builds
        ch.ws.stage_seq += 1
        ch.answered.append("other:1")
        return window(view, tl, ahead)

    monkeypatch.setattr(stage_data, "window", meanwhile)
    data = payload(ch)
    assert data["answered"] is None and data["seq"] == 0 and data["view"] == 0


def test_a_payload_built_before_the_page_changed_its_view_is_older(pair):
    """The route's answer to an older message can reach the browser after a script run's payload (the
    route waited for a cycle computed ahead meanwhile). Built before the page switched lecture mode on,
    it must carry a smaller `version`, which the browser drops, not the same one, which it would take,
    putting back the picture without lecture mode."""
    from specviz.ui.stage_protocol import payload

    ch = channel(pair)
    before = payload(ch)
    ch.look(dataclasses.replace(VIEW, lecture=True))
    after = payload(ch)
    assert not before["lecture"] and after["lecture"] and after["version"] > before["version"]
    ch.look(dataclasses.replace(VIEW, lecture=True))  # the same view again (a script run that changed nothing)
    assert payload(ch)["version"] == after["version"]


def test_a_report_that_arrives_after_a_later_click_leaves_the_server_where_the_click_went(pair):
    """The route's calls run side by side and take the workspace's lock in no set order (bench.load at
    N = 8: a report of step 5, sent before a Next cycle click, was carried out after it, and the
    click's answer came back at step 5). A message sent before one already carried out changes nothing."""
    ch = channel(pair)
    run_id = ch.ws.run.id
    stage_route.answer(ch, {"kind": "next_cycle", "run": run_id, "step": 0, "target": 5, "req": "m:1", "sent": 1.0})
    click = {"kind": "next_cycle", "run": run_id, "step": 5, "target": 10, "req": "m:2", "sent": 3.0}
    assert stage_route.answer(ch, click)["view"] == 10
    late = stage_route.answer(ch, {"kind": "view", "run": run_id, "step": 5, "sent": 2.0})
    assert late["view"] == 10 and ch.ws.run.view == 10 and late["answered"] == "m:2"
    newer = stage_route.answer(ch, {"kind": "view", "run": run_id, "step": 7, "sent": 4.0})  # going back is allowed
    assert newer["view"] == 7 and ch.ws.run.view == 7
    unstamped = stage_route.answer(ch, {"kind": "view", "run": run_id, "step": 6})  # no `sent`: carried out
    assert unstamped["view"] == 6
