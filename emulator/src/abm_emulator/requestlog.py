"""The outermost layer of both origins: request ids, the ``Date`` header and the log of recent requests.

Every response, whatever produced it (a route, a validation error, a fault, the rate limiter, the
storage app), leaves through here, so this is the one place that guarantees ``x-request-id`` and a
``Date`` read from the emulated clock: a client measures delays on the service's clock (it retries an
account the service did not know a day later by the service's ``Date``), and the emulated clock is the
emulator's real time. uvicorn's own real-time ``Date`` is turned off in `server.serve_both`.

The log keeps each request's headers so tests can prove the API key never reached the storage origin,
and, for the API origin, its JSON body, so a test can read which accounts each add or remove carried.
Bodies are bounded twice (one body, and all bodies together) so a long load test cannot grow the
emulator without limit. The log also remembers the server's per-request cycle object, through which
the fault injector reaches the connection to drop it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from abm_emulator.asgi import (
    CYCLE_KEY,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    read_ahead,
    replaying,
    set_header,
)

REQUEST_ID_HEADER = b"x-request-id"
DATE_HEADER = b"date"
#: A body larger than this is not kept (its size still is): one add of 1000 accounts is ~150 KB.
MAX_BODY_BYTES = 1 << 20
#: The bodies kept across the whole log; past it the oldest entries lose theirs first.
MAX_TOTAL_BODY_BYTES = 64 << 20


def _reject_constant(name: str) -> Any:
    """``NaN`` and ``Infinity`` are not JSON, though Python's parser takes them: such a body is not kept."""
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes) -> Any:
    """Strict JSON, or ``None`` when ``raw`` is not a JSON document (too deep counts as not JSON)."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


class RequestLog:
    """A bounded record of recent requests (oldest dropped first), shared by both origins.

    Bodies are held as the bytes received (so the memory they take is the bound) and parsed when the
    log is read. ``max_body_bytes`` and ``max_total_body_bytes`` are arguments so tests can prove both
    bounds with small values.
    """

    def __init__(
        self,
        maxlen: int = 5000,
        max_body_bytes: int = MAX_BODY_BYTES,
        max_total_body_bytes: int = MAX_TOTAL_BODY_BYTES,
    ) -> None:
        self.maxlen = maxlen
        self.max_body_bytes = max_body_bytes
        self.max_total_body_bytes = max_total_body_bytes
        self._entries: OrderedDict[str, dict[str, Any]] = OrderedDict()  # by requestId, oldest first
        self._bodies: OrderedDict[str, bytes] = OrderedDict()  # by requestId, oldest first
        self._body_total = 0

    def record(self, entry: dict[str, Any], body: bytes | None = None) -> None:
        """Add ``entry`` (keyed by its ``requestId``), with its body if it is JSON and small enough."""
        if len(self._entries) >= self.maxlen:
            evicted, _ = self._entries.popitem(last=False)
            self._forget_body(evicted)
        request_id: str = entry["requestId"]
        self._entries[request_id] = entry
        if body is not None and len(body) <= self.max_body_bytes and parse_json(body) is not None:
            self._keep_body(request_id, body)

    def _keep_body(self, request_id: str, body: bytes) -> None:
        """Hold ``body``, then drop the oldest bodies (not their entries) until all fit the total."""
        self._bodies[request_id] = body
        self._body_total += len(body)
        while self._body_total > self.max_total_body_bytes:
            _, dropped = self._bodies.popitem(last=False)
            self._body_total -= len(dropped)

    def _forget_body(self, request_id: str) -> None:
        dropped = self._bodies.pop(request_id, None)
        if dropped is not None:
            self._body_total -= len(dropped)

    def kept_body_bytes(self) -> int:
        """What the kept bodies take together (never more than ``max_total_body_bytes``)."""
        return self._body_total

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first, each with ``body``: its parsed JSON body, or ``None``."""
        return [{**entry, "body": self._parsed(request_id)} for request_id, entry in self._entries.items()]

    def _parsed(self, request_id: str) -> Any:
        raw = self._bodies.get(request_id)
        return None if raw is None else parse_json(raw)

    def clear(self) -> None:
        self._entries.clear()
        self._bodies.clear()
        self._body_total = 0


def _request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name; repeated ones joined with ``, `` as HTTP allows."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _body_size(messages: list[Message]) -> int:
    return sum(len(m.get("body", b"")) for m in messages if m["type"] == "http.request")


def _counting(receive: Receive, entry: dict[str, Any]) -> Receive:
    """A ``receive`` that adds the body bytes it passes on to ``entry["bodyBytes"]``.

    The log reads a body only up to its limit; the rest of a larger one reaches the app through here,
    so the entry still says how large the body was.
    """

    async def counted() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            entry["bodyBytes"] += len(message.get("body", b""))
        return message

    return counted


def http_date(instant: datetime) -> str:
    """IMF-fixdate (``Tue, 03 Mar 2026 04:05:06 GMT``), the one form RFC 9110 lets a server send."""
    return format_datetime(instant.astimezone(UTC), usegmt=True)


class RequestBookkeeping:
    """Adds ``x-request-id`` and the emulated ``Date`` to every response and logs the request.

    Admin calls are neither logged nor have their bodies read. On the API origin the body is read
    ahead (up to the log's ``max_body_bytes``) and replayed to the app, so it is logged even when a
    fault or the rate limiter answers before any route reads it.
    """

    def __init__(self, app: ASGIApp, origin: str, log: RequestLog, clock: Callable[[], datetime]) -> None:
        self.app = app
        self.origin = origin
        self.log = log
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # uvicorn's send is a bound method of its per-request cycle, which owns the transport.
        scope[CYCLE_KEY] = getattr(send, "__self__", None)
        request_id = uuid.uuid4().hex
        entry: dict[str, Any] | None = None
        if not (self.origin == "api" and scope["path"].startswith("/_admin")):
            entry = self._entry(scope, request_id)
            receive = await self._record(entry, receive)
        await self.app(scope, receive, self._stamping(send, request_id, entry))

    def _entry(self, scope: Scope, request_id: str) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "method": scope["method"],
            "path": scope["path"],
            "query": scope.get("query_string", b"").decode("latin-1"),
            "headers": _request_headers(scope),
            "requestId": request_id,
            "time": time.time(),
            "status": None,
            "bodyBytes": None,
        }

    async def _record(self, entry: dict[str, Any], receive: Receive) -> Receive:
        """Log ``entry`` (with its body on the API origin); returns the ``receive`` the app must use."""
        if self.origin != "api":
            self.log.record(entry)
            return receive
        messages, body = await read_ahead(receive, self.log.max_body_bytes)
        entry["bodyBytes"] = _body_size(messages)
        self.log.record(entry, body)
        return replaying(messages, _counting(receive, entry))

    def _stamping(self, send: Send, request_id: str, entry: dict[str, Any] | None) -> Send:
        """A ``send`` that sets one ``Date`` and an ``x-request-id`` on the response and logs its status."""

        async def send_stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == REQUEST_ID_HEADER for k, _ in headers):
                    headers = set_header(headers, REQUEST_ID_HEADER, request_id.encode())
                headers = set_header(headers, DATE_HEADER, http_date(self.clock()).encode())
                message = {**message, "headers": headers}
                if entry is not None:
                    entry["status"] = message["status"]
            await send(message)

        return send_stamped
