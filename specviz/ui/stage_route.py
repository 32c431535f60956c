"""The stage's own HTTP route, `POST /api/specviz/stage`: the browser asks for cycles without a
Streamlit script run (docs/design.md §3, "The stage").

The page is an `st.App` (app.py) with this one more route. The component posts what its trigger
would send, `{"token": ..., "event": {...}}`, answered as the trigger's (`stage_protocol.handle`,
`.payload`); the token names one session's `Channel`, held weakly here. An answer whose action left
something for the page to say (an error, the end of the text) carries `redraw`.

The route is open to anyone who can reach the server, so it spends nothing on what is not a stage
message of a live session: a body too large (413) or not JSON with finite numbers (400) is refused
before it is read or parsed any further (`route_body`, shared with the live lecture's route); one
that is no stage event is 400; an unknown or ended session 410 (the
page then stops using the route); and one session has at most `MAX_SESSION_CALLS` calls in flight
(429), so no client holds the worker threads that every session's calls share.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from . import offline
from .route_body import Refused, parse_json, read_body
from .stage_protocol import Channel, handle, parse, payload, served_stamp

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PATH = "/api/specviz/stage"
# Worker threads for the route's calls, apart from the web server's shared pool (which also serves
# the page's files): a call may wait for the session's lock or a decoding slot for a while, and a
# classroom's waiting calls must not hold up a page that is opening.
MAX_CALLS = 64
# A page has at most a request and its resends (4, 8, 16 s on), a prefetch or two and a report out at
# once; a call may wait for a prefetch (`stage_protocol.PREFETCH_WAIT_S`). More than this from one
# session is refused (429; the page then sends it through its trigger, which queues it in order of
# arrival, so the margin matters: a message that arrives late is skipped by `in_order`).
MAX_SESSION_CALLS = 8
_limiter: Any = None
_LOG = logging.getLogger(__name__)
_channels: weakref.WeakValueDictionary[str, Channel] = weakref.WeakValueDictionary()
_path = PATH  # where `routes()` put the route (under the server's baseUrlPath)
_served: str | None = None  # ... once the server is up (`lifespan`): payloads name it from then on


def register(channel: Channel) -> None:
    _channels[channel.token] = channel


def address() -> str | None:
    """Where the component posts its messages, or None when this process serves no route (AppTest,
    or a test that imports app.py: building the st.App serves nothing until the server starts)."""
    return _served


def serving() -> bool:
    """Whether this process serves pages to browsers through the st.App (not AppTest)."""
    return _served is not None


def base_path() -> str:
    """The server's `baseUrlPath`, without slashes ('' for none): st.App mounts its routes under it."""
    from streamlit import config

    return (config.get_option("server.baseUrlPath") or "").strip("/")


def routes() -> list[Any]:
    """The route, for `st.App(..., routes=routes(), lifespan=lifespan)`. Under the server's
    `baseUrlPath` when one is set (st.App mounts its own routes there, not the app's)."""
    from starlette.routing import Route

    global _path
    base = base_path()
    _path = f"/{base}{PATH}" if base else PATH
    return [Route(_path, _endpoint, methods=["POST"])]


@contextlib.asynccontextmanager
async def lifespan(_app: Any) -> AsyncIterator[None]:
    """The st.App's lifespan: while the server runs, payloads name the route; it calls no other host."""
    global _served
    offline.seal()
    _served = _path
    try:
        yield
    finally:
        _served = None


def answer(channel: Channel, event: dict[str, Any]) -> dict[str, Any]:
    """Carry out a parsed event for the channel's session and return the payload that answers it
    (no Streamlit state is touched: this runs in a worker thread of the web server)."""
    start = time.time() * 1000
    redraw = handle(channel, event, route=True)
    data = payload(channel, route=address(), served=served_stamp(event, start), deflate=False)  # the server gzips it
    data["redraw"] = redraw or bool(channel.ws.error or channel.ws.finished_note)
    return data


async def _endpoint(request: Request) -> Response:
    from starlette.responses import JSONResponse

    try:
        channel, event = _message(await read_body(request))
        return await _answered(channel, event)
    except Refused as no:
        return JSONResponse({"error": no.error}, status_code=no.status)


def _message(body: bytes) -> tuple[Channel, dict[str, Any]]:
    """The session's channel and the parsed event, or `Refused` with the status that says why."""
    message = parse_json(body, "a stage message")
    token = message.get("token") if isinstance(message, dict) else None
    event = parse(message.get("event")) if isinstance(token, str) else None
    if event is None:
        raise Refused(400, "not a stage event")
    channel = _channels.get(token)
    if channel is None or channel.view is None or not channel.current:
        raise Refused(410, "no such session (it ended, or the server restarted)")
    if channel.ws.run is None:  # a Reset on its way: the page's next run starts the new one
        raise Refused(409, "no run is shown")
    return channel, event


async def _answered(channel: Channel, event: dict[str, Any]) -> Response:
    """Carry the event out in a worker thread, at most `MAX_SESSION_CALLS` at once per session."""
    import anyio
    from starlette.responses import JSONResponse, Response

    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(MAX_CALLS)
    if channel.calls >= MAX_SESSION_CALLS:  # counted in the event loop's one thread: no lock needed
        raise Refused(429, f"more than {MAX_SESSION_CALLS} calls of this session at once")
    channel.calls += 1
    try:
        data = await anyio.to_thread.run_sync(answer, channel, event, limiter=_limiter)
    except Exception:  # the page's own path reports it, with the usual words
        _LOG.exception("the stage route failed on %s", event["kind"])
        return JSONResponse({"error": "the server could not answer"}, status_code=500)
    finally:
        channel.calls -= 1
    return Response(json.dumps(data, separators=(",", ":")), media_type="application/json")
