"""The stage's own HTTP route, `POST /api/specviz/stage`: the browser asks for cycles without a
Streamlit script run (docs/design.md §3, "The stage").

The page is an `st.App` (app.py) with this one more route. The component posts what its trigger
would send, `{"token": ..., "event": {...}}`, answered as the trigger's (`stage_protocol.handle`,
`.payload`); the token names one session's `Channel`, held weakly here. An answer whose action left
something for the page to say (an error, the end of the text) carries `redraw`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .stage_protocol import Channel, handle, parse, payload, served_stamp

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PATH = "/api/specviz/stage"
MAX_BODY = 64 * 1024  # a message is a few hundred bytes (its `have` list at most a few kB)
# Worker threads for the route's calls, apart from the web server's shared pool (which also serves
# the page's files): a call may wait for the session's lock or a decoding slot for a while, and a
# classroom's waiting calls must not hold up a page that is opening.
MAX_CALLS = 64
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


def routes() -> list[Any]:
    """The route, for `st.App(..., routes=routes(), lifespan=lifespan)`. Under the server's
    `baseUrlPath` when one is set (st.App mounts its own routes there, not the app's)."""
    from starlette.routing import Route
    from streamlit import config

    global _path
    base = (config.get_option("server.baseUrlPath") or "").strip("/")
    _path = f"/{base}{PATH}" if base else PATH
    return [Route(_path, _endpoint, methods=["POST"])]


@contextlib.asynccontextmanager
async def lifespan(_app: Any) -> AsyncIterator[None]:
    """The st.App's lifespan: while the server runs, payloads name the route."""
    global _served
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
    import anyio
    from starlette.responses import JSONResponse, Response

    body = await request.body()
    if len(body) > MAX_BODY:
        return JSONResponse({"error": "message too large"}, status_code=413)
    try:
        message = json.loads(body)
        token = str(message["token"])
        event = parse(message.get("event"))
    except (ValueError, KeyError, TypeError):
        return JSONResponse({"error": "not a stage message"}, status_code=400)
    if event is None:
        return JSONResponse({"error": "not a stage event"}, status_code=400)
    channel = _channels.get(token)
    if channel is None or channel.view is None:
        return JSONResponse({"error": "no such session (it ended, or the server restarted)"}, status_code=410)
    if channel.ws.run is None:  # a Reset on its way: the page's next run starts the new one
        return JSONResponse({"error": "no run is shown"}, status_code=409)
    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(MAX_CALLS)
    try:
        data = await anyio.to_thread.run_sync(answer, channel, event, limiter=_limiter)
    except Exception:  # the page's own path reports it, with the usual words
        _LOG.exception("the stage route failed on %s", event["kind"])
        return JSONResponse({"error": "the server could not answer"}, status_code=500)
    return Response(json.dumps(data, separators=(",", ":")), media_type="application/json")
