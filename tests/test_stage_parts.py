"""One renderer: a step's views are declared once (`stage_data.PARTS`) and drawn by the same stage code
in the app, the standalone page and a live lecture's follower page.

A dummy view is added in that one place (the `dummy` fixture: one more `Part`, nothing else) and is
found in all three: in the app's payload (its bodies, as the stage's route and the component send them)
and the component's script, in the standalone page's sections and script, and in the room's answer to a
follower and the follower page's script; then, in Chromium, drawn by each page's own glue on the stage.
And the stage's code stays small: no function of its files is over 80 lines."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import specviz
from specviz.config import DecodeConfig
from specviz.ui import live, live_route, stage_protocol
from specviz.ui.runs import record_of
from specviz.ui.state import Workspace, advance_cycle, start_live_run
from specviz.viz import follower, stage_data, stage_js, standalone
from specviz.viz.static_files import STATIC

ROOT = Path(__file__).resolve().parent.parent
VIEW = stage_protocol.PageView(lecture=False, max_rows=6, proposer_label="draft model", suffix="", compare=None,
                               quiz=False, tabs=False)
MAX_LINES = 80  # a function of the stage's code, as in the Python code


def _dummy_view(view: stage_data.StepView) -> str:
    return f"<p class='sv-dummy'>dummy view at step {view.step} ({view.phase})</p>"


DUMMY = stage_data.Part("dummy", _dummy_view, region="side")


@pytest.fixture
def dummy(monkeypatch):
    """The dummy view, registered in the one place a view is declared."""
    monkeypatch.setattr(stage_data, "PARTS", (*stage_data.PARTS, DUMMY))
    return DUMMY


@pytest.fixture(scope="module")
def pair():
    return specviz.build_tiny_pair(seed=0)


def _channel(pair) -> stage_protocol.Channel:
    """A session's stage with one cycle computed, shown at its end (step 5), and a live lecture on."""
    ws = Workspace()
    run = start_live_run(ws.new_id(), "test", ("key", 1), pair, DecodeConfig(k=3, page_size=4, seed=1),
                         pair.tokenizer.encode("Hello there, world"))
    ws.run = advance_cycle(run)
    live.start(ws)
    return stage_protocol.Channel(ws, view=VIEW)


def _the_dummy(step: int, phase: str) -> str:
    return f"dummy view at step {step} ({phase})"


def test_the_step_payload_has_one_key_per_part_and_pack_sends_the_heavy_ones_once():
    names = [p.name for p in stage_data.PARTS]
    assert len(set(names)) == len(names) and not set(names) & set(stage_data.HEAD)
    assert set(stage_data.body_keys()) == {"kv", "story", "strip"}  # the status line is made fresh
    spec = json.loads(re.search(r"const SV_PARTS = (\[.*?\]);\n", stage_js.core_js()).group(1))
    assert [p["name"] for p in spec] == names and spec[1] == {
        "name": "kv", "region": "pics", "patch": True, "many": 2, "heavy": True, "css": "svs-pic", "attrs": {}}
    with pytest.raises(ValueError, match="a new name"):
        stage_data.Part("title", _dummy_view, region="side")  # a step's own field
    with pytest.raises(ValueError, match="one of"):
        stage_data.Part("x", _dummy_view, region="header")


def test_a_view_declared_once_reaches_the_app_the_standalone_page_and_the_follower(pair, dummy):
    ch = _channel(pair)
    # The app: the payload (the route's, plain) carries it in every step's body, and the component's
    # script knows where to draw it.
    data = stage_protocol.payload(ch, deflate=False)
    steps = stage_data.unpack(data)
    assert set(steps) == {str(s) for s in range(6)}
    for s, d in steps.items():
        assert d["dummy"] == _dummy_view(stage_data.StepView(None, int(s), d["cycle"], d["phase"], None, False, 6))
    assert all("dummy" not in h for h in data["steps"].values())  # a heavy part: in the bodies only
    assert '"name": "dummy"' in stage_js.app_js()
    # The standalone page: a box of each step's section, and the same table in its script.
    page = standalone.run_html(record_of(ch.ws.run))
    assert page.count("data-part='dummy'") == 6 and _the_dummy(3, "accept") in page
    assert '"name": "dummy"' in page
    # The follower: the room the payload published to answers with it, and its page's script draws it.
    room = ch.ws.live.room
    student = room.join()
    answer = asyncio.run(live_route._here(room, {"student": student, "step": None, "since": -1, "have": []}))
    assert answer["step"] == 5 and _the_dummy(5, "rollback") in json.dumps(answer["bodies"])
    assert '"name": "dummy"' in follower.page_html(room.code, "/api/specviz/live/" + room.code)


# The app's component, as Streamlit mounts it: its module imported from a Blob URL, its default export
# called with the payload (sending goes nowhere here).
MOUNT_JS = """async ([js, data]) => {
  const mod = await import(URL.createObjectURL(new Blob([js], {type: 'text/javascript'})));
  const parentElement = document.createElement('div');
  document.body.appendChild(parentElement);
  mod.default({data, parentElement, setTriggerValue: () => {}});
}"""
DUMMY_TEXT = ("() => { const e = document.querySelector('.svs .svs-side > [data-part=dummy]');"
              " return e && e.innerText; }")


@pytest.mark.browser
def test_each_page_draws_the_dummy_view_on_its_stage(pair, dummy, browser, tmp_path, monkeypatch):
    from bench.load import CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed")
    ch = _channel(pair)
    errors: list[str] = []
    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    # The app's stage, fed the component's payload (deflated, as the component is sent it), in a page of
    # an origin of its own (about:blank has no cookies, which the glue writes).
    page.route("http://specviz.test/", lambda route: route.fulfill(content_type="text/html", body="<body></body>"))
    page.goto("http://specviz.test/")
    page.evaluate(MOUNT_JS, [stage_js.app_js(), stage_protocol.payload(ch)])
    page.wait_for_function("() => window.__specvizStage && window.__specvizStage.state.cur === 5")
    assert page.evaluate(DUMMY_TEXT) == _the_dummy(5, "rollback")
    page.evaluate("() => window.__specvizStage.back()")
    assert page.evaluate(DUMMY_TEXT) == _the_dummy(4, "resolve")
    # The standalone page: read back from its sections by its own glue.
    path = tmp_path / "run.html"
    path.write_text(standalone.run_html(record_of(ch.ws.run)))
    page.goto(path.as_uri())
    page.wait_for_function("() => window.__specvizStage && window.__specvizStage.state.cur === 0")
    assert page.evaluate(DUMMY_TEXT).startswith("dummy view at step 0")
    page.keyboard.press("ArrowRight")
    assert page.evaluate(DUMMY_TEXT) == _the_dummy(1, "draft")
    # The follower page, fed by the room through the live route's own answers (a short long poll).
    monkeypatch.setattr(live_route, "HOLD_S", 0.1)
    room = ch.ws.live.room
    address = f"http://specviz.test{live_route.PATH}/{room.code}"
    page.route(address, lambda route: _room_route(route, room, address))
    page.goto(address)
    page.wait_for_function("() => window.__specvizStage && window.__specvizStage.state.cur === 5")
    assert page.evaluate(DUMMY_TEXT) == _the_dummy(5, "rollback")
    page.close()
    assert not errors, errors


def _room_route(route, room, address: str) -> None:
    """The follower's page and its calls, answered as `live_route` answers them."""
    request = route.request
    if request.method == "GET":
        route.fulfill(content_type="text/html", body=follower.page_html(room.code, address))
        return
    message = json.loads(request.post_data)
    if message["do"] == "join":
        answer = {"student": room.join(), "code": room.code}
    else:  # Playwright's own loop runs here: the coroutine runs in a thread of its own
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(asyncio.run, live_route._here(room, message)).result()
    route.fulfill(content_type="application/json", body=json.dumps(answer))


def test_no_function_of_the_stage_is_over_80_lines():
    files = [*stage_js.CORE, "stage_app.js", "standalone.js"]
    longest = {name: _longest_function(STATIC / name) for name in files}
    assert all(n <= MAX_LINES for n, _ in longest.values()), longest
    assert (STATIC / "stage.js").read_text().count("\n") < 120  # createStage and its api, the rest by job


def _longest_function(path: Path) -> tuple[int, int]:
    """(lines, first line) of the longest block that follows `)` or `=>` (a function's body, or a block
    inside one) in a JavaScript file: strings, template literals and comments skipped."""
    text = path.read_text()
    frames: list = []  # "T" a template literal, "E" an expression in one, (line, is a body) a block
    best, line, i, prev = (0, 0), 1, 0, ""  # prev: the code before, its last two characters but spaces
    while i < len(text):
        c = text[i]
        line += c == "\n"
        if frames and frames[-1] == "T":  # inside `...`: only its end and its ${ matter
            if c == "\\":
                i += 1
            elif c == "`":
                frames.pop()
            elif text.startswith("${", i):
                frames.append("E")
                i += 1
            i += 1
            continue
        if text.startswith("//", i):
            i = text.index("\n", i)
            continue
        if text.startswith("/*", i):
            end = text.index("*/", i)
            line += text.count("\n", i, end)
            i = end + 2
            continue
        if c in "'\"":
            j = i + 1
            while text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i, prev = j + 1, (prev + c)[-2:]
            continue
        if c == "`":
            frames.append("T")
        elif c == "{":
            frames.append((line, prev.endswith(")") or prev == "=>"))
        elif c == "}":
            top = frames.pop()
            if top != "E" and top[1] and line - top[0] + 1 > best[0]:
                best = (line - top[0] + 1, top[0])
        if not c.isspace():
            prev = (prev + c)[-2:]
        i += 1
    assert not frames, (path.name, frames[-3:])
    return best
