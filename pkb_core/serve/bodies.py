"""Request bodies of the reward service: bounded before they are read, parsed with bounded nesting.

Every route has a cap on its body (:func:`body_cap`). A request whose ``Content-Length``
is over its route's cap is answered 413 before one byte of its body is read
(:func:`declared_too_large`, called by the app's guard for every request); a body sent
without a length (``Transfer-Encoding: chunked``) is read chunk by chunk with a running
count, and the read stops keeping it with a 413 the moment the count passes the cap
(:func:`read_json`; the rest is read and dropped up to :data:`DRAIN_LIMIT` in all), so the
service never holds more than the cap and one chunk of it.
A refusal sent before the body was read asks the client to close the connection, so the
server does not go on draining a body nobody will read; a body declared at most
:data:`DRAIN_LIMIT` long is read and dropped first (:func:`drained`), so the answer is not lost
to the reset that closing a connection with unread bytes in it causes.

JSON is parsed by :func:`parse_json`: a body that is not JSON (or not UTF-8) is a 400 with
one line, and so is one nested deeper than :data:`MAX_DEPTH`, whether the parser's own
recursion guard stops it (a few thousand levels: ``RecursionError``, once a 500) or the
walk over what it parsed does. No request of the service nests more than three levels.
"""
from __future__ import annotations

import asyncio
import json

from pkb_core.serve.refusal import Refused

#: The largest submission body (its source limit, ``--max-source-kb``, is checked again with its own message).
MAX_SUBMISSION = 8 << 20
#: The largest bulk-cancel body: tens of thousands of job ids.
MAX_CANCEL = 1 << 20
#: Routes that read no body: a declared one over this is refused, a smaller one is never read.
MAX_OTHER = 16 << 10
#: The deepest JSON nesting taken (an object holding a list is two levels).
MAX_DEPTH = 64
#: A body declared over its cap but at most this long is read and dropped (never kept) before
#: the 413, for at most :data:`DRAIN_S` seconds, so the answer reaches a client that sends its whole
#: body before it reads: closing a connection with unread bytes in it resets it, and the answer
#: can be lost with them (seen under load). Longer ones are refused unread, the connection closed.
DRAIN_LIMIT = 4 * MAX_SUBMISSION
DRAIN_S = 5.0


class TooLarge(Refused):
    """A body over its route's cap: HTTP 413. ``whole``: the rest of it was read and dropped
    (:func:`read_json`), so the connection stays whole; else it is closed."""

    def __init__(self, message: str, *, whole: bool = False):
        super().__init__(message, 413)
        self.whole = whole


class NotJson(Refused):
    """A body that is not JSON, or nests too deep: HTTP 400."""

    def __init__(self, message: str):
        super().__init__(message, 400)


def body_cap(method: str, path: str) -> int:
    """The most bytes a request body to ``method path`` may have."""
    if method == "POST" and path == "/v1/jobs":
        return MAX_SUBMISSION
    if method == "POST" and path == "/v1/jobs/cancel":
        return MAX_CANCEL
    return MAX_OTHER


def declared_too_large(method: str, path: str, content_length: str | None) -> TooLarge | None:
    """The 413 for a request whose ``Content-Length`` header passes its route's cap, else None
    (no header: a streamed body, counted as it is read)."""
    if content_length is None:
        return None
    cap = body_cap(method, path)
    try:
        declared = int(content_length)
    except ValueError:
        return None  # the HTTP server refuses a malformed length before the app sees the request
    if declared > cap:
        return TooLarge(f"the request body is {declared} bytes; at most {cap} for {method} {path}")
    return None


async def read_json(request, cap: int):
    """The JSON value of ``request``'s body (a Starlette request), read with a running cap:
    :class:`TooLarge` at the first chunk that passes ``cap``, :class:`NotJson` for what
    :func:`parse_json` refuses."""
    body = bytearray()
    stream = request.stream()
    async for chunk in stream:
        body += chunk
        if len(body) > cap:
            seen = len(body)
            del body[:]  # nothing of it is kept
            # The rest is read and dropped, up to DRAIN_LIMIT in all, so that the answer reaches a
            # client that sends its whole body before it reads (a 64 MiB one lost its 413 to the
            # reset of a connection closed with bytes unread, under load); a longer one is cut off.
            whole = await _dropped(stream, DRAIN_LIMIT - seen)
            raise TooLarge(f"the request body passed {cap} bytes before it ended; at most {cap} for "
                           f"{request.method} {request.url.path}", whole=whole)
    # Parsing and the depth walk are linear in the (capped) body; off the event loop all the same.
    return await asyncio.to_thread(parse_json, bytes(body))


def parse_json(body: bytes):
    """``body`` parsed as JSON; :class:`NotJson` (one line) when it is not JSON or nests deeper
    than :data:`MAX_DEPTH`."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise NotJson(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # UnicodeDecodeError too: JSON is UTF-8
        raise NotJson(f"the request body is not JSON ({exc})") from None
    if _deeper_than(value, MAX_DEPTH):
        raise NotJson(f"the request body nests deeper than {MAX_DEPTH} levels")
    return value


def _deeper_than(value, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep: a walk level by level, with no
    recursion (what it checks cannot make it recurse), over containers only."""
    level = [value] if type(value) in (dict, list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for item in level:
            below += [child for child in (item.values() if type(item) is dict else item)
                      if type(child) is dict or type(child) is list]
        level = below
    return False


async def _dropped(stream, room: int) -> bool:
    """Read and drop what is left of ``stream`` while it stays within ``room`` bytes and
    :data:`DRAIN_S`; whether it ended."""
    async def drop() -> bool:
        left = room
        async for chunk in stream:
            left -= len(chunk)
            if left < 0:
                return False
        return True

    try:
        return await asyncio.wait_for(drop(), DRAIN_S)
    except Exception:  # noqa: BLE001 - too slow (a timeout) or a client gone: close instead
        return False


async def drained(request, declared: int) -> bool:
    """Read and drop ``request``'s body of ``declared`` bytes when it is at most :data:`DRAIN_LIMIT`
    and arrives within :data:`DRAIN_S`; whether it did (else the connection is to be closed)."""
    return declared <= DRAIN_LIMIT and await _dropped(request.stream(), DRAIN_LIMIT)
