"""What the app's own HTTP routes take from outside: a bounded body, parsed as JSON with finite numbers.

The stage's route (`stage_route`) and the live lecture's (`live_route`) are open to anyone who can
reach the server, so neither spends anything on a request before it has passed here: a body over
`MAX_BODY` is refused from its Content-Length before a byte is read, or as soon as a chunked body
passes it (413); a body that is not JSON, or whose numbers are not finite (`1e999`, `NaN`), is 400.
A refusal is a `Refused`, which each route answers as `{"error": ...}` with its status.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request

MAX_BODY = 64 * 1024  # a message is a few hundred bytes (a stage's `have` list at most a few kB)


class Refused(Exception):
    """A request refused before anything was spent on it: the HTTP status and the reason, said."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status, self.error = status, error


async def read_body(request: Request) -> bytes:
    """The request's body, refused (413) before it is read when it says it is too large, and as soon
    as a body that does not say (chunked) passes `MAX_BODY`."""
    length = request.headers.get("content-length")
    if length is not None and not (length.isdigit() and int(length) <= MAX_BODY):
        raise Refused(413 if length.isdigit() else 400, "message too large" if length.isdigit() else "bad length")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refused(413, "message too large")
    return bytes(body)


def parse_json(body: bytes, what: str) -> Any:
    """The body as JSON whose numbers are all finite; else 400 naming `what` was expected."""
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Refused(400, f"not {what} (JSON with finite numbers)") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number here")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value
