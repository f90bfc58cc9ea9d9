"""Calling the emulator's pure-ASGI layers in-process, with the body in chosen chunks.

httpx's ASGI transport sends a body as one message; these helpers send it in pieces (as a socket
delivers a large upload), so read-ahead, replay and counting are exercised across messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from abm_emulator.asgi import ASGIApp, Message


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header_values(self, name: bytes) -> list[bytes]:
        return [v for k, v in self.headers if k.lower() == name]


async def call(
    app: ASGIApp,
    *,
    method: str = "POST",
    path: str = "/accountLists/v2/x",
    chunks: tuple[bytes, ...] = (b"",),
) -> Answer:
    """One request through ``app``; after the body, ``receive`` says the client went away."""
    pending: list[Message] = [
        {"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
        for index, chunk in enumerate(chunks)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": [],
    }
    await app(scope, receive, send)
    [start] = [m for m in sent if m["type"] == "http.response.start"]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(start["status"], list(start.get("headers", [])), body)


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """An app answering 200 with the very body it received: proves a layer replayed all of it."""
    body = bytearray()
    while True:
        message = await receive()
        body.extend(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"date", b"app's own")]})
    await send({"type": "http.response.body", "body": bytes(body), "more_body": False})
