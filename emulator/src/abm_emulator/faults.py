"""Fault injection for both origins, as pure ASGI middleware driven by the admin API.

Faults reproduce what a client meets in production and must survive: a 503 before or *after* a POST
took effect, a connection reset with no answer, a download cut off mid-body, a slow answer, a body
that is not valid JSON. They sit below the request log (so a faulted request is still recorded and
still gets ``x-request-id``) and above the routes (so "after" faults let the request take effect).

A fault may also match the request body (``bodyContains``): a service that refuses one account makes
every batch holding it fail, and a client that splits a refused batch must be tested against that. The
body is then read before the fault is chosen and replayed to the app when no fault applies.

Dropping a connection needs the transport, which ASGI does not expose; uvicorn's ``send`` is a bound
method of its per-request cycle object, which `requestlog.RequestBookkeeping` stores in the scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
import struct
import uuid
from dataclasses import dataclass, field
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
    send_error,
    set_header,
)
from abm_emulator.errors import ApiError, invalid, status_name

KINDS = ("status", "reset", "disconnect_mid_body", "delay", "malformed_json")
ORIGINS = ("api", "storage")
#: A ``bodyContains`` fault reads at most this much of a body; a larger body does not match it.
BODY_MATCH_LIMIT = 8 << 20
REFUSED_ACCOUNT = "account refused by the service"


@dataclass
class Fault:
    id: str
    origin: str
    method: str
    path: str
    kind: str
    status: int = 503
    retry_after: str | None = None
    when: str = "before"
    delay_seconds: float = 0.0
    after_bytes: int = 0
    remaining: int | None = 1
    probability: float | None = None
    seed: int | None = None
    body_contains: str | None = None
    fired: int = 0
    _pattern: re.Pattern[str] = field(default=re.compile(""), repr=False)
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "origin": self.origin,
            "method": self.method,
            "path": self.path,
            "kind": self.kind,
            "status": self.status,
            "retryAfter": self.retry_after,
            "when": self.when,
            "delaySeconds": self.delay_seconds,
            "afterBytes": self.after_bytes,
            "count": self.remaining,
            "probability": self.probability,
            "seed": self.seed,
            "bodyContains": self.body_contains,
            "fired": self.fired,
        }

    def matches_body(self, body: bytes | None) -> bool:
        """A fault without ``bodyContains`` matches any body; one with it, a body read whole that holds it."""
        if self.body_contains is None:
            return True
        return body is not None and self.body_contains.encode() in body


def _nonnegative(spec: dict[str, Any], name: str, default: float, *, integer: bool = False) -> float:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise invalid(name, f"must be a number >= 0, got {value!r}")
    if integer and value != int(value):
        raise invalid(name, f"must be a whole number, got {value!r}")
    return float(value)


def parse_fault(spec: dict[str, Any]) -> Fault:
    """Validate an admin fault body; every mistake is a 400 naming the field."""
    known = {
        "origin",
        "method",
        "path",
        "kind",
        "status",
        "retryAfter",
        "when",
        "delaySeconds",
        "afterBytes",
        "count",
        "probability",
        "seed",
        "bodyContains",
    }
    unknown = sorted(set(spec) - known)
    if unknown:
        raise invalid(unknown[0], f"unknown fault field; known: {', '.join(sorted(known))}")
    origin = spec.get("origin", "api")
    if origin not in ORIGINS:
        raise invalid("origin", f"must be one of {ORIGINS}, got {origin!r}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise invalid("kind", f"must be one of {KINDS}, got {kind!r}")
    method = spec.get("method", "*")
    if not isinstance(method, str) or not method:
        raise invalid("method", "must be an HTTP method or '*'")
    path = spec.get("path", ".*")
    try:
        pattern = re.compile(path)
    except (re.error, TypeError) as exc:
        raise invalid("path", f"is not a valid regular expression: {exc}") from None
    status = spec.get("status", 503)
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise invalid("status", f"must be an HTTP error status 400-599, got {status!r}")
    when = spec.get("when", "before")
    if when not in ("before", "after"):
        raise invalid("when", f"must be 'before' or 'after', got {when!r}")
    retry_after = spec.get("retryAfter")
    if retry_after is not None:
        if isinstance(retry_after, bool) or not isinstance(retry_after, str | int | float):
            raise invalid("retryAfter", 'must be a header value such as "2"')
        retry_after = str(retry_after)
    probability = spec.get("probability")
    if probability is not None and (
        isinstance(probability, bool) or not isinstance(probability, int | float) or not 0 <= probability <= 1
    ):
        raise invalid("probability", f"must be between 0 and 1, got {probability!r}")
    seed = spec.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise invalid("seed", f"must be an integer, got {seed!r}")
    body_contains = spec.get("bodyContains")
    if body_contains is not None and (not isinstance(body_contains, str) or not body_contains):
        raise invalid("bodyContains", f"must be a non-empty string, got {body_contains!r}")
    remaining: int | None
    if "count" in spec:
        count = spec["count"]
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise invalid("count", f"must be an integer >= 1 or null (unlimited), got {count!r}")
        remaining = count
    else:
        # A probabilistic fault keeps firing until cleared; a plain one fires once.
        remaining = None if probability is not None else 1
    return Fault(
        id=uuid.uuid4().hex[:12],
        origin=origin,
        method=method.upper(),
        path=path,
        kind=kind,
        status=status,
        retry_after=retry_after,
        when=when,
        delay_seconds=_nonnegative(spec, "delaySeconds", 0.0),
        after_bytes=int(_nonnegative(spec, "afterBytes", 0, integer=True)),
        remaining=remaining,
        probability=None if probability is None else float(probability),
        seed=seed,
        body_contains=body_contains,
        _pattern=pattern,
        _rng=random.Random(seed),
    )


class FaultInjector:
    """The active faults; `take` picks (and consumes) the first that matches a request."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def add(self, spec: dict[str, Any]) -> dict[str, Any]:
        fault = parse_fault(spec)
        self._faults.append(fault)
        return fault.describe()

    def clear(self) -> None:
        self._faults.clear()

    def describe(self) -> list[dict[str, Any]]:
        return [f.describe() for f in self._faults]

    def wants_body(self, origin: str, method: str, path: str) -> bool:
        """Whether choosing a fault for this request needs its body: reading it costs only then."""
        return any(f.body_contains is not None and _targets(f, origin, method, path) for f in self._faults)

    def take(self, origin: str, method: str, path: str, body: bytes | None = None) -> Fault | None:
        """The first fault for this request, consumed; ``body`` is ``None`` when it was not read whole."""
        for fault in self._faults:
            if not _targets(fault, origin, method, path) or not fault.matches_body(body):
                continue
            # Drawn only for requests the fault targets, so a seed gives one sequence over them.
            if fault.probability is not None and fault._rng.random() >= fault.probability:
                continue
            fault.fired += 1
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
            return fault
        return None


def _targets(fault: Fault, origin: str, method: str, path: str) -> bool:
    return fault.origin == origin and fault.method in ("*", method) and bool(fault._pattern.fullmatch(path))


def refused_accounts(body: bytes | None, needle: str) -> list[tuple[str, str]]:
    """The ``accounts[i].id`` holding ``needle`` in an ``{"accounts": [...]}`` body, as field violations.

    So an injected 400 names the account it refused, as the service's BadRequest does, and a client can
    be tested on what it does with that (set the account aside, split the batch).
    """
    try:
        document = json.loads(body) if body is not None else None
    except (ValueError, RecursionError):
        return []
    accounts = document.get("accounts") if isinstance(document, dict) else None
    if not isinstance(accounts, list):
        return []
    return [
        (f"accounts[{index}].id", REFUSED_ACCOUNT)
        for index, account in enumerate(accounts)
        if isinstance(account, dict) and isinstance(account.get("id"), str) and needle in account["id"]
    ]


class _CutOff(Exception):
    """Raised from a wrapped ``send`` to stop the app once the connection was dropped on purpose."""


def _transport(scope: Scope) -> Any:
    cycle = scope.get(CYCLE_KEY)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        raise ApiError(500, "fault injection needs uvicorn's transport, which this server does not expose")
    return transport


def _mark_disconnected(scope: Scope) -> None:
    # Tell uvicorn the peer is gone so it does not try to answer a request we dropped on purpose.
    cycle = scope.get(CYCLE_KEY)
    if cycle is not None and hasattr(cycle, "disconnected"):
        cycle.disconnected = True


async def _reset(scope: Scope) -> None:
    """Drop the connection with a TCP RST and no answer, like a crashed proxy."""
    transport = _transport(scope)
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
    _mark_disconnected(scope)
    await asyncio.sleep(0)


async def _drain_and_close(scope: Scope) -> None:
    """Close after what was already written reached the socket: the peer sees a short body."""
    transport = _transport(scope)
    for _ in range(500):
        if transport.is_closing() or transport.get_write_buffer_size() == 0:
            break
        await asyncio.sleep(0.01)
    transport.close()
    _mark_disconnected(scope)
    await asyncio.sleep(0)


def _violations(fault: Fault, body: bytes | None) -> list[tuple[str, str]]:
    """A 400 fault matched on the body names the accounts it refused; other faults name nothing."""
    if fault.status != 400 or fault.body_contains is None:
        return []
    return refused_accounts(body, fault.body_contains)


class FaultMiddleware:
    """Applies the injector's faults to one origin; ``body_limit`` bounds what ``bodyContains`` reads."""

    def __init__(
        self, app: ASGIApp, origin: str, injector: FaultInjector, body_limit: int = BODY_MATCH_LIMIT
    ) -> None:
        self.app = app
        self.origin = origin
        self.injector = injector
        self.body_limit = body_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.origin == "api" and scope["path"].startswith("/_admin")):
            await self.app(scope, receive, send)
            return
        receive, body = await self._body_if_wanted(scope, receive)
        fault = self.injector.take(self.origin, scope["method"], scope["path"], body)
        if fault is None:
            await self.app(scope, receive, send)
            return
        try:
            await self._apply(fault, scope, receive, send, body)
        except _CutOff:
            return

    async def _body_if_wanted(self, scope: Scope, receive: Receive) -> tuple[Receive, bytes | None]:
        """Read the body when a ``bodyContains`` fault could apply; the app still receives all of it."""
        if not self.injector.wants_body(self.origin, scope["method"], scope["path"]):
            return receive, None
        messages, body = await read_ahead(receive, self.body_limit)
        return replaying(messages, receive), body

    async def _apply(
        self, fault: Fault, scope: Scope, receive: Receive, send: Send, body: bytes | None
    ) -> None:
        if fault.kind == "delay":
            await self._delay(fault, scope, receive, send)
        elif fault.kind == "reset":
            await _reset(scope)
        elif fault.kind == "status":
            await self._status(fault, scope, receive, send, body)
        elif fault.kind == "disconnect_mid_body":
            await self._disconnect_mid_body(fault, scope, receive, send)
        else:
            await self._malformed_json(scope, receive, send)

    async def _delay(self, fault: Fault, scope: Scope, receive: Receive, send: Send) -> None:
        """Receive the whole request, wait, then act on it: a server that is slow, not one that is gone.

        The request is read before the wait, as a real server holds it once it arrived, so a client
        that times out and disconnects meanwhile does not stop it: the create still happens, after the
        client gave up. That is the case a client must reconcile rather than blindly send again (had
        the body been read after the wait, the disconnect would have made the request fail instead).
        """
        messages, _ = await read_ahead(receive)
        await asyncio.sleep(fault.delay_seconds)
        await self.app(scope, replaying(messages, receive), send)

    async def _status(
        self, fault: Fault, scope: Scope, receive: Receive, send: Send, body: bytes | None
    ) -> None:
        if fault.when == "after":

            async def discard(_message: Message) -> None:
                return None

            await self.app(scope, receive, discard)
        headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else {}
        violations = _violations(fault, body)
        named = f": {', '.join(f for f, _ in violations)}" if violations else ""
        await send_error(
            send,
            fault.status,
            f"Injected fault: HTTP {fault.status} {status_name(fault.status)}{named}",
            status_name(fault.status),
            headers,
            violations,
        )

    async def _disconnect_mid_body(self, fault: Fault, scope: Scope, receive: Receive, send: Send) -> None:
        sent = 0

        async def cut(message: Message) -> None:
            nonlocal sent
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunk: bytes = message.get("body", b"")
            room = fault.after_bytes - sent
            if len(chunk) < room:
                sent += len(chunk)
                await send(message)
                return
            if room > 0:
                await send({"type": "http.response.body", "body": chunk[:room], "more_body": True})
                sent += room
            await _drain_and_close(scope)
            raise _CutOff

        await self.app(scope, receive, cut)

    async def _malformed_json(self, scope: Scope, receive: Receive, send: Send) -> None:
        start: Message | None = None
        body = bytearray()

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        await self.app(scope, receive, capture)
        # Half of a JSON document is never valid JSON (an empty one becomes a lone brace).
        broken = bytes(body[: len(body) // 2]) if len(body) > 1 else b"{"
        status = start["status"] if start else 200
        headers = list(start.get("headers", [])) if start else []
        headers = set_header(headers, b"content-type", b"application/json")
        headers = set_header(headers, b"content-length", str(len(broken)).encode())
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": broken, "more_body": False})
