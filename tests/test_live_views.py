"""A live lecture's other views (viz/follower_views.py, the live route's `view`): the app's Distributions
and Statistics tabs for the step a student looks at, drawn from the room's copy of the lecturer's
cycles, never past the lecturer's step, built once for the whole room, every value escaped.

Real traces: the tiny pair decodes the cycles (a chain and a token tree); the route is called as the
web server calls it (an ASGI request)."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from hostile_runs import MARK, PAYLOADS, hostile_text, tiny_record

from specviz import DecodeConfig, SpeculativeDecoder, build_tiny_pair
from specviz.runfile import load_run
from specviz.stats import acceptance_stats
from specviz.timeline import PHASES_PER_CYCLE
from specviz.ui import live, live_route
from specviz.viz import follower, follower_views


@pytest.fixture(scope="module")
def runs():
    pair = build_tiny_pair(seed=0)
    out = {}
    for name, cfg in {"chain": DecodeConfig(k=4, seed=3, temperature=1.0),
                      "tree": DecodeConfig(k=3, tree_width=2, tree_nodes=7, seed=3)}.items():
        dec = SpeculativeDecoder(pair, cfg)
        dec.start(pair.tokenizer.encode("the quick brown fox jumps"))
        out[name] = tuple(dec.step() for _ in range(4))
    return out


def _timeline(traces, real=None):
    return SimpleNamespace(traces=traces, started=True, real=real)


async def _asgi(handler, body: bytes = b"", code: str = "", method: str = "POST", headers=()) -> tuple:
    from starlette.requests import Request

    sent = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return sent.pop(0)

    scope = {"type": "http", "method": method, "path": f"{live_route.PATH}/{code}", "headers": list(headers),
             "query_string": b"", "path_params": {"code": code}}
    response = await handler(Request(scope, receive))
    return response.status_code, bytes(response.body), dict(response.headers)


def _post(room, message: dict) -> tuple[int, dict]:
    status, body, _ = asyncio.run(_asgi(live_route._call, json.dumps(message).encode(), room.code))
    return status, json.loads(body)


def test_the_distributions_reveal_what_the_phase_has_and_follow_the_position_asked(runs):
    traces = runs["chain"]
    at = {phase: 1 + i for i, phase in enumerate(("draft", "verify", "accept", "resolve", "rollback"))}
    draft = follower_views.view("charts", traces, True, at["draft"])
    assert len(draft.figures) == 1 and "not scored the drafts yet" in draft.html  # q only: nothing tested
    verify = follower_views.view("charts", traces, True, at["verify"])
    shown = json.loads(verify.json())
    assert len(shown["figures"]) == 3 and shown["html"].count("svf-fig") == 3
    assert "u=" not in json.dumps(shown["figures"][1])  # the draws and the verdicts wait for accept
    accept = json.loads(follower_views.view("charts", traces, True, at["accept"]).json())
    assert "u=" in json.dumps(accept["figures"][1]) or traces[0].temperature == 0
    resolve = follower_views.view("charts", traces, True, at["resolve"])
    assert len(resolve.figures) == 4 and resolve.key == follower_views.view_key("charts", traces, True, at["rollback"])
    k = traces[0].k
    other = follower_views.view("charts", traces, True, at["resolve"], pos=k)
    assert other.key.endswith(f":{k}") and f"data-pos='{k}' aria-pressed='true'" in other.html
    assert json.loads(other.json())["figures"][2]["layout"]["title"]["text"].startswith(f"p{k} vs q{k}")
    start = follower_views.view("charts", traces, True, 0)
    assert start.figures == () and "draft phase to see them" in start.html


def test_the_statistics_count_the_cycles_done_by_the_step_shown(runs):
    for name, traces in runs.items():
        assert "once a cycle has been stepped through" in follower_views.view("stats", traces, True, 4).html
        for done in (1, 3):
            step = done * PHASES_PER_CYCLE + 2  # mid-way through the next cycle: it is not counted yet
            view = follower_views.view("stats", traces, True, step)
            st = acceptance_stats(traces[:done])
            assert view.key == f"stats:{done}" and view.html.count("<tbody><tr>") == 1
            assert view.html.count("</tr>") == done + 1  # the history: a header and a row per cycle done
            if name == "tree":  # a tree's figure is tokens per verify pass, outside α
                assert "Tokens per verify pass" in view.html and f"{st.tokens_per_cycle:.2f}" in view.html
                assert len(view.figures) == 1  # time per cycle only: no α histogram for trees
            else:
                assert f"{st.alpha:.3f}" in view.html and len(view.figures) == 2
                panels = json.loads(view.json())["figures"][0]
                assert [b["y"] for b in panels["data"][:1]] == [list(st.accepted_hist)]


def test_hostile_records_are_drawn_as_text_in_every_view():
    record = load_run(json.dumps(hostile_text(tiny_record(1).to_dict())))
    traces = tuple(record.traces)
    html = follower_views.myths_html()
    for step in range(PHASES_PER_CYCLE * len(traces) + 1):
        for tab in follower_views.TABS:
            view = follower_views.view(tab, traces, True, step)
            html += view.html + "".join(view.figures)
    assert MARK in html  # the texts are shown...
    assert not any(p in html for p in PAYLOADS)  # ...as text: never as markup
    page = follower.page_html("ABCDE", "/x'><script>", "/p.js?v='><script>")
    assert "<script>" not in page.split("<script type='module'>")[0]


def test_the_room_holds_the_lecturers_cycles_up_to_the_lecturers_step_only(runs):
    traces = runs["chain"]
    ws = SimpleNamespace(live=None)
    room = live.start(ws).room
    try:
        live.publish(ws, 1, 7, {"7": {"title": "c2"}}, seq=1, timeline=_timeline(traces, real=2))
        assert room.traces == traces[:2] and room.traces[1] is traces[1]  # held, not copied; cycle 3 is ahead
        version = room.version
        live.publish(ws, 1, 7, {"7": room.frames["7"]}, sent=("p", 1.0), timeline=_timeline(traces))
        assert room.version == version  # the same cycles: followers keep waiting
        live.publish(ws, 1, 11, {}, sent=("p", 2.0), timeline=_timeline(traces))
        assert room.traces == traces[:3]
        live.publish(ws, 2, 0, {"0": {"title": "prefill"}}, seq=2)  # a new run: the old one's cycles go
        assert room.traces == ()
    finally:
        live.end(ws)


def test_the_view_route_answers_a_student_a_step_the_lecturer_showed_built_once_for_the_room(runs, monkeypatch):
    traces = runs["chain"]
    ws = SimpleNamespace(live=None)
    room = live.start(ws).room
    try:
        live.publish(ws, 3, 10, {"10": {"title": "c2"}}, seq=1, timeline=_timeline(traces))
        a, b = (_post(room, {"do": "join"})[1]["student"] for _ in range(2))
        built = []
        real = follower_views.view
        monkeypatch.setattr(follower_views, "view", lambda *args: built.append(args) or real(*args))
        ask = {"do": "view", "student": a, "run": 3, "step": 9, "tab": "charts", "pos": None}
        status, first = _post(room, ask)
        assert status == 200 and first["key"] == "charts:1:resolve:1" and len(first["figures"]) == 4
        assert _post(room, {**ask, "student": b, "step": 10}) == (200, first)  # the same view: built once
        assert len(built) == 1
        assert _post(room, {**ask, "tab": "stats"})[1]["key"] == "stats:1"
        assert _post(room, {**ask, "step": 11})[0] == 403  # the lecturer has not shown it yet
        assert _post(room, {**ask, "run": 2})[0] == 409  # an old run: the page follows into the new one
        assert _post(room, {**ask, "student": "stranger"})[0] == 403
        for bad in ({"tab": "lab"}, {"step": -1}, {"step": True}, {"pos": "2"}, {"run": 1.5}):
            assert _post(room, {**ask, **bad})[0] == 400, bad
    finally:
        live.end(ws)


def test_plotly_js_is_served_from_the_installed_package_gzipped_once():
    import plotly

    status, body, headers = asyncio.run(_asgi(live_route._plotly, method="GET",
                                              headers=[(b"accept-encoding", b"gzip, br")]))
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["content-type"].startswith("text/javascript")
    raw = gzip.decompress(body)
    assert raw == (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    assert b"plotly.js v" in raw[:100] and len(body) < len(raw) / 2
    status, plain, headers = asyncio.run(_asgi(live_route._plotly, method="GET"))
    assert plain == raw and "content-encoding" not in headers
    page = follower.page_html("ABCDE", "/api/specviz/live/ABCDE", "/api/specviz/live/static/plotly.min.js?v=1")
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page)  # nothing from another host


def test_a_student_leaving_while_a_view_waits_to_be_built_does_not_cancel_it_for_the_others(runs):
    traces = runs["chain"]
    ws = SimpleNamespace(live=None)
    room = live.start(ws).room
    busy = threading.Event()
    try:
        live.publish(ws, 4, 10, {"10": {"title": "c2"}}, seq=1, timeline=_timeline(traces))
        a, b = (_post(room, {"do": "join"})[1]["student"] for _ in range(2))
        live_route._builder.submit(busy.wait, 30)  # the builder is busy: the view waits in its queue
        ask = {"do": "view", "run": 4, "step": 8, "tab": "charts", "pos": None}

        def asking(student: str):
            return asyncio.ensure_future(_asgi(live_route._call, json.dumps({**ask, "student": student}).encode(),
                                               room.code))

        async def two_ask_one_leaves():
            first, second = asking(a), asking(b)
            while not any(key[0] == room.code and len(f._done_callbacks) == 2  # both wait on this room's view
                          for key, (_, f) in live_route._built.items()):
                await asyncio.sleep(0.01)
            first.cancel()  # a student closes the page
            busy.set()
            return await second

        status, body, _ = asyncio.run(two_ask_one_leaves())
        assert status == 200 and json.loads(body)["key"] == "charts:1:accept:1"
    finally:
        busy.set()
        live.end(ws)
