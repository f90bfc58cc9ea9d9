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
    send: Send, code: int, message: str, status: str | None = None, headers: dict[str, str] | None = None
) -> None:
    """Answer with the service's JSON error body, outside FastAPI."""
    body = json.dumps(error_payload(code, message, status)).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": code, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def set_header(headers: list[tuple[bytes, bytes]], name: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    """Replace (or add) one header in an ASGI header list."""
    return [(k, v) for k, v in headers if k.lower() != name] + [(name, value)]
