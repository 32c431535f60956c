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
from specviz.ui import route_body, stage_route
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
    d.pop("timings_ms", None), d.pop("total_ms", None)
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
    return asyncio.run(_call(body))


def test_the_endpoint_answers_a_session_and_turns_away_the_rest(pair):
    ch = channel(pair)
    event = {"kind": "next_cycle", "run": ch.ws.run.id, "step": 0, "target": 5, "req": "m:1"}
    status, data = _post(json.dumps({"token": ch.token, "event": event}).encode())
    assert status == 200 and data["view"] == 5 and data["answered"] == "m:1"
    assert _post(b"not json")[0] == 400
    assert _post(json.dumps({"token": ch.token, "event": {"kind": "explode"}}).encode())[0] == 400
    assert _post(json.dumps({"token": "guess", "event": event}).encode())[0] == 410
    assert _post(b" " * (route_body.MAX_BODY + 1))[0] == 413
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


# ---- what is not a stage message of a live session costs nothing (issue 33, parts 5 and 6b) ----------


def _asgi(chunks: list[bytes], headers: list[tuple[bytes, bytes]] = ()) -> tuple[int, dict, int]:
    """The endpoint called with a body in `chunks` (chunked unless `headers` gives a length): the
    status, the JSON answer and how many chunks the endpoint asked for."""
    from starlette.requests import Request

    asked = []

    async def receive() -> dict:
        asked.append(1)
        more = len(asked) < len(chunks)
        return {"type": "http.request", "body": chunks[len(asked) - 1], "more_body": more}

    async def call() -> tuple[int, dict, int]:
        scope = {"type": "http", "method": "POST", "path": stage_route.PATH, "headers": list(headers),
                 "query_string": b""}
        response = await stage_route._endpoint(Request(scope, receive))
        return response.status_code, json.loads(response.body), len(asked)

    return asyncio.run(call())


def test_an_oversized_body_is_refused_before_it_is_read():
    ten_mb = [b"x" * (1 << 20)] * 10
    status, data, asked = _asgi(ten_mb, [(b"content-length", str(10 << 20).encode())])
    assert (status, asked) == (413, 0) and "too large" in data["error"]  # refused from its length alone
    status, _, asked = _asgi([b"x" * 16384] * 640)  # chunked, no length: read only up to the limit
    assert status == 413 and asked == route_body.MAX_BODY // 16384 + 1
    assert _asgi([b"{}"], [(b"content-length", b"-5")])[0] == 400


def test_numbers_that_are_not_finite_or_out_of_range_are_400_not_500(pair):
    ch = channel(pair)
    run_id = ch.ws.run.id
    for raw in (b'{"kind": "view", "run": %d, "step": 1e999}', b'{"kind": "view", "run": %d, "step": NaN}',
                b'{"kind": "view", "run": %d, "step": -Infinity}',
                b'{"kind": "view", "run": %d, "step": 1, "sent": 1e300}',
                b'{"kind": "seek", "run": %d, "step": 1, "target": 99999999999}'):
        body = b'{"token": "%s", "event": %s}' % (ch.token.encode(), raw % run_id)
        status, data = _post(body)
        assert status == 400 and "error" in data, raw
    assert _post(b'{"token": 5, "event": {}}')[0] == 400 and _post(b"[1, 2]")[0] == 400
    assert _post(b"\xff\xfe")[0] == 400 and _post(b"[" * 60_000)[0] == 400  # nested past the parser's depth


def test_one_session_cannot_hold_the_routes_threads(pair, monkeypatch):
    """Calls of one session past `MAX_SESSION_CALLS` are refused at once (429) while its first ones
    wait; another session's call is answered meanwhile, and the session's calls are free again after."""
    import threading

    hog, other = channel(pair), channel(pair)
    release = threading.Event()
    answer = stage_route.answer

    def slow(ch, event):
        if ch is hog:
            release.wait(60)
        return answer(ch, event)

    monkeypatch.setattr(stage_route, "answer", slow)

    def body(ch) -> bytes:
        return json.dumps({"token": ch.token, "event": {"kind": "view", "run": ch.ws.run.id, "step": 0}}).encode()

    async def scenario() -> tuple[list[int], int, list[int]]:
        waiting = [asyncio.create_task(_call(body(hog))) for _ in range(stage_route.MAX_SESSION_CALLS)]
        while hog.calls < stage_route.MAX_SESSION_CALLS:
            await asyncio.sleep(0)
        refused = [(await _call(body(hog)))[0] for _ in range(3)]
        answered = (await _call(body(other)))[0]
        release.set()
        return refused, answered, [(await t)[0] for t in waiting]

    refused, answered, held = asyncio.run(scenario())
    assert refused == [429] * 3 and answered == 200 and held == [200] * stage_route.MAX_SESSION_CALLS
    assert hog.calls == 0 and _post(body(hog))[0] == 200


async def _call(body: bytes) -> tuple[int, dict]:
    from starlette.requests import Request

    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return sent.pop(0)

    scope = {"type": "http", "method": "POST", "path": stage_route.PATH, "headers": [], "query_string": b""}
    response = await stage_route._endpoint(Request(scope, receive))
    return response.status_code, json.loads(response.body)


def test_a_channel_whose_workspace_another_session_took_over_is_gone(pair):
    """A reload's new session takes the workspace over (`session.open_workspace`): the old session's
    channel must not drive it any more (two browsers on one run)."""
    ch = channel(pair)
    event = {"kind": "view", "run": ch.ws.run.id, "step": 0}
    assert _post(json.dumps({"token": ch.token, "event": event}).encode())[0] == 200
    ch.ws.owner = "another session"
    assert _post(json.dumps({"token": ch.token, "event": event}).encode())[0] == 410


def test_a_stamp_from_the_future_cannot_freeze_a_session(pair, monkeypatch):
    """`sent` is the page's clock: a message stamped far ahead (a forged value, a clock gone wrong) holds
    later messages back only within `ORDER_WINDOW_S` of the server's clock, and once the session has
    a baseline it does not even become the latest."""
    from specviz.ui import stage_protocol

    now = [1000.0]
    monkeypatch.setattr(stage_protocol, "_clock", lambda: now[0])
    ch = channel(pair)
    rid = ch.ws.run.id
    stage_route.answer(ch, {"kind": "next_cycle", "run": rid, "step": 0, "target": 5, "req": "m:1"})
    stage_route.answer(ch, {"kind": "view", "run": rid, "step": 1, "sent": 1e15})  # the first message: a baseline
    assert stage_route.answer(ch, {"kind": "view", "run": rid, "step": 2, "sent": 50.0})["view"] == 1  # held back
    now[0] += stage_protocol.ORDER_WINDOW_S
    assert stage_route.answer(ch, {"kind": "view", "run": rid, "step": 3, "sent": 60.0})["view"] == 3  # not for ever
    assert stage_route.answer(ch, {"kind": "view", "run": rid, "step": 4, "sent": 9e15})["view"] == 4  # carried out...
    assert stage_route.answer(ch, {"kind": "view", "run": rid, "step": 2, "sent": 70.0})["view"] == 2  # ... not latest
    assert stage_route.answer(ch, {"kind": "view", "run": rid, "step": 1, "sent": 65.0})["view"] == 2  # still ordered
