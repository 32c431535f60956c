"""A live lecture's routes for students: the follower's page and the calls it makes.

    GET  /api/specviz/live            the join page: type the room's code
    GET  /api/specviz/live/<code>     the follower's page (the stage fed by the room: viz/follower.py)
    GET  /api/specviz/live/static/plotly.min.js   the installed `plotly` package's plotly.js (no CDN)
    POST /api/specviz/live/<code>     {"do": "join"}                          -> {"student": key}
                                      {"do": "here", "student", "step", "following", "since", "have"}
                                                                               -> the room's step data
                                      {"do": "answer", "student", "poll", "option"} -> the poll as you see it
                                      {"do": "view", "student", "run", "step", "tab", "pos"}
                                                                               -> a tab's view of that step

`here` is a long poll: answered at once when the room changed since the follower's `since`
(its version), else held (asynchronously: no worker thread waits) until it changes or
`HOLD_S` passes. One poll per page in flight, answered from memory: a room of a hundred costs the
server a hundred idle coroutines. Measured against Server-Sent Events, the poll needs no new
dependency and survives the same proxies as the rest of the page (docs/design.md §3, "A live
lecture"). The lecturer's own calls are the lecturer's Streamlit session (`live`, `live_panel`).

`view` (a student opened the Distributions or Statistics tab: `viz/follower_views`) is asked only
while a tab is open, so the long poll's answer stays the stage's alone. A view is built once for
the whole room (cached by what it shows: every student at that step asking at once waits for the
one build), in one worker thread, never on the event loop.

Everything here is refused before it is spent on: bodies too large or not JSON (`route_body`), JSON that is not an
object of the expected fields (400), a code that is unknown (404) or ended (410), a key that is
not a student of the room (403), an answer after the reveal (409), a full room (429).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import gzip
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..room import Room, RoomError, normalise_code
from ..viz import follower, follower_views, stage_data
from . import live
from .route_body import Refused, parse_json, read_body

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PATH = "/api/specviz/live"
HOLD_S = 15.0  # a long poll is answered after this long even when nothing changed
TICK_S = 0.05  # how often a held poll looks at its room's version (a lecturer's click reaches followers in this)
MAX_HAVE = 512
LECTURER_ONLY = ("move", "open_poll", "reveal", "glance", "results", "answers")
PLOTLY_JS = "/static/plotly.min.js"  # under PATH: two path segments, never taken for a room's code
MAX_VIEWS = 64  # views kept built, over every room (one is ~40 KB)


def routes(base: str = "") -> list[Any]:
    from starlette.routing import Route

    path = f"/{base}{PATH}" if base else PATH
    return [Route(path, _join_page, methods=["GET"]), Route(path + PLOTLY_JS, _plotly, methods=["GET"]),
            Route(path + "/{code}", _page, methods=["GET"]), Route(path + "/{code}", _call, methods=["POST"])]


async def _join_page(request: Request) -> Response:
    """The join form; submitted (`?code=...`), it goes to the room's page."""
    from starlette.responses import HTMLResponse, RedirectResponse

    path = str(request.url.path)
    code = normalise_code(request.query_params.get("code", ""))
    if code:
        return RedirectResponse(f"{path.rstrip('/')}/{quote(code)}", status_code=303)
    return HTMLResponse(follower.join_html(path), headers=_no_store())


async def _page(request: Request) -> Response:
    from starlette.responses import HTMLResponse

    code = request.path_params["code"]
    try:
        room = live.rooms().find(code)
    except RoomError as no:
        return HTMLResponse(follower.join_html(_join_path(request), str(no)), status_code=no.status,
                            headers=_no_store())
    base = _join_path(request)
    plotly, app = f"{base}{PLOTLY_JS}?v={quote(plotly_version())}", base[: -len(PATH)] + "/"
    return HTMLResponse(follower.page_html(room.code, str(request.url.path), plotly, app), headers=_no_store())


async def _call(request: Request) -> Response:
    from starlette.responses import JSONResponse

    try:
        message = _message(await read_body(request))
        room = live.rooms().find(request.path_params["code"])
        do = message.get("do")
        if do == "join":
            return JSONResponse({"student": room.join(), "code": room.code})
        if do == "here":
            return JSONResponse(await _here(room, message))
        if do == "answer":
            return JSONResponse(room.answer(str(message.get("student")), message.get("poll"), message.get("option")))
        if do == "view":
            return await _view(room, message)
        if do in LECTURER_ONLY:  # the lecturer's moves are the lecturer's session's, never a page's call
            raise Refused(403, "only the lecturer's own page can do that")
        raise Refused(400, "'do' is one of join, here, answer, view")
    except Refused as no:
        return JSONResponse({"error": no.error}, status_code=no.status)
    except RoomError as no:
        return JSONResponse({"error": str(no)}, status_code=no.status)


def _message(body: bytes) -> dict[str, Any]:
    message = parse_json(body, "a live-lecture message")
    if not isinstance(message, dict):
        raise Refused(400, "not a live-lecture message (a JSON object)")
    return message


async def _here(room: Room, message: dict[str, Any]) -> dict[str, Any]:
    """Where the student is, said; the room's state once it is newer than the student's `since`."""
    step, since, have = message.get("step"), message.get("since", -1), message.get("have", [])
    if not (step is None or _count(step)) or not _count(since, low=-1) or not isinstance(have, list):
        raise Refused(400, "'step' and 'since' are counts, 'have' a list of step signatures")
    have = {h for h in have[:MAX_HAVE] if _count(h)}
    student = str(message.get("student"))
    room.here(student, step, message.get("following") is not False)  # 403 for a stranger, at once
    waited = 0.0
    while room.version <= since and waited < HOLD_S:
        await asyncio.sleep(TICK_S)
        waited += TICK_S
    seen = room.here(student, step, message.get("following") is not False)
    with room.lock:
        frames, lecture = dict(room.frames), room.lecture
    packed = stage_data.pack(frames, have=have, shown=room.step, deflate=False) if frames else {
        "steps": {}, "bodies": {}}
    return {**seen, **packed, "code": room.code, "lecture": lecture, "waiting": not frames}


# ---------------------------------------------------------------- the other views --------------

_builder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="specviz-views")  # one at a time
_built: collections.OrderedDict[tuple, tuple[Any, concurrent.futures.Future]] = collections.OrderedDict()
_built_lock = threading.Lock()


async def _view(room: Room, message: dict[str, Any]) -> Response:
    """A tab's view of a step the lecturer has shown (403 for a later one, 409 for an old run)."""
    from starlette.responses import Response

    tab, run, step, pos = message.get("tab"), message.get("run"), message.get("step"), message.get("pos")
    if tab not in follower_views.TABS or not _count(run) or not _count(step) or not (pos is None or _count(pos)):
        raise Refused(400, "'tab' is charts or stats, 'run' and 'step' are counts, 'pos' a count or null")
    traces, started = room.record(str(message.get("student")), run, step)
    key = (room.code, run, id(traces), follower_views.view_key(tab, traces, started, step, pos))
    with _built_lock:
        held = _built.get(key)
        if held is None or held[0] is not traces or held[1].cancelled():  # the same id, another tuple: rebuilt
            build = functools.partial(follower_views.view, tab, traces, started, step, pos)
            held = _built[key] = (traces, _builder.submit(lambda: build().json()))
            while len(_built) > MAX_VIEWS:
                _built.popitem(last=False)
        _built.move_to_end(key)
    try:
        # Shielded: a student who leaves while the view is built must not cancel it for the others waiting.
        body = await asyncio.shield(asyncio.wrap_future(held[1]))
    except Exception:
        with _built_lock:
            if _built.get(key) is held:
                del _built[key]  # a failed build is not kept: the next ask tries again
        raise
    return Response(body, media_type="application/json", headers=_no_store())


async def _plotly(request: Request) -> Response:
    """plotly.js from the installed `plotly` package (what the app's own charts are), gzipped once:
    the follower page loads it when a student first opens a tab of charts."""
    from starlette.responses import Response

    raw, packed = await asyncio.to_thread(_plotly_bytes)
    headers = {"Cache-Control": "public, max-age=86400", "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(packed, media_type="text/javascript", headers=headers | {"Content-Encoding": "gzip"})
    return Response(raw, media_type="text/javascript", headers=headers)


_plotly_lock = threading.Lock()


def _plotly_bytes() -> tuple[bytes, bytes]:
    with _plotly_lock:  # a class opening its first tab at once compresses it once
        return _plotly_read()


@functools.cache
def _plotly_read() -> tuple[bytes, bytes]:
    import plotly

    raw = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    return raw, gzip.compress(raw, 6, mtime=0)


def plotly_version() -> str:
    import plotly

    return plotly.__version__


def _count(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < 2**31


def _join_path(request: Request) -> str:
    path = str(request.url.path)
    return path[: path.rfind("/")]


def _no_store() -> dict[str, str]:
    return {"Cache-Control": "no-store"}  # a room's page is live: never a cached copy
