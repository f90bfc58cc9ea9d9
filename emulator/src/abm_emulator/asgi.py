"""Small ASGI helpers shared by the pure-ASGI layers (request log, faults, rate limit)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from abm_emulator.errors import error_payload

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CYCLE_KEY = "abm.cycle"


async def send_error(
    send: Send,
    code: int,
    message: str,
    status: str | None = None,
    headers: dict[str, str] | None = None,
    field_violations: list[tuple[str, str]] | None = None,
) -> None:
    """Answer with the service's JSON error body, outside FastAPI (with its ``fieldViolations``, if any)."""
    body = json.dumps(error_payload(code, message, status, field_violations)).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": code, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def set_header(headers: list[tuple[bytes, bytes]], name: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    """Replace (or add) one header in an ASGI header list."""
    return [(k, v) for k, v in headers if k.lower() != name] + [(name, value)]


async def read_ahead(receive: Receive, limit: int | None = None) -> tuple[list[Message], bytes | None]:
    """Receive the request body before the app does; returns the messages taken and the whole body.

    A layer that must see the body to decide (a fault matching it, the request log) reads it here and
    hands the messages back with `replaying`, so the app still receives every byte. ``limit`` bounds
    what is held in memory: past it reading stops, the body is ``None`` and the rest stays unread for
    the app to receive. A disconnect before the end also gives ``None``.
    """
    messages: list[Message] = []
    body = bytearray()
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        body.extend(message.get("body", b""))
        if limit is not None and len(body) > limit:
            return messages, None
        if not message.get("more_body", False):
            return messages, bytes(body)


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives ``messages`` (taken by `read_ahead`) first, then the live ones."""
    pending = iter(messages)

    async def buffered() -> Message:
        for message in pending:
            return message
        return await receive()

    return buffered
