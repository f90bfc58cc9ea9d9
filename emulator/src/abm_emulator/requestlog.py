"""The outermost layer of both origins: request ids and the log of recent requests.

Every response, whatever produced it (a route, a validation error, a fault, the rate limiter, the
storage app), leaves through here, so this is the one place that guarantees ``x-request-id``. The
log keeps each request's headers so tests can prove the API key never reached the storage origin.
It also remembers the server's per-request cycle object, through which the fault injector reaches
the connection to drop it.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from typing import Any

from abm_emulator.asgi import CYCLE_KEY, ASGIApp, Message, Receive, Scope, Send, set_header

REQUEST_ID_HEADER = b"x-request-id"


class RequestLog:
    """A bounded record of recent requests (oldest dropped first), shared by both origins."""

    def __init__(self, maxlen: int = 5000) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=maxlen)

    def record(self, entry: dict[str, Any]) -> None:
        self._entries.append(entry)

    def entries(self) -> list[dict[str, Any]]:
        return list(self._entries)

    def clear(self) -> None:
        self._entries.clear()


class RequestBookkeeping:
    """Adds ``x-request-id`` to every response and logs the request (admin calls excluded)."""

    def __init__(self, app: ASGIApp, origin: str, log: RequestLog) -> None:
        self.app = app
        self.origin = origin
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # uvicorn's send is a bound method of its per-request cycle, which owns the transport.
        scope[CYCLE_KEY] = getattr(send, "__self__", None)
        request_id = uuid.uuid4().hex
        path: str = scope["path"]
        entry: dict[str, Any] | None = None
        if not (self.origin == "api" and path.startswith("/_admin")):
            headers: dict[str, str] = {}
            for raw_name, raw_value in scope.get("headers", []):
                name = raw_name.decode("latin-1").lower()
                value = raw_value.decode("latin-1")
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            entry = {
                "origin": self.origin,
                "method": scope["method"],
                "path": path,
                "query": scope.get("query_string", b"").decode("latin-1"),
                "headers": headers,
                "requestId": request_id,
                "time": time.time(),
                "status": None,
            }
            self.log.record(entry)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == REQUEST_ID_HEADER for k, _ in headers):
                    headers = set_header(headers, REQUEST_ID_HEADER, request_id.encode())
                message = {**message, "headers": headers}
                if entry is not None:
                    entry["status"] = message["status"]
            await send(message)

        await self.app(scope, receive, send_with_id)
