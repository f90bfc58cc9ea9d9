"""Hostile HTTP servers for the hostile suite: raw sockets on 127.0.0.1, every answer scripted.

``HostileServer(handler)`` listens on an ephemeral port of 127.0.0.1 (never any other address) and
gives every accepted connection its own thread, which reads one request (headers and a
``Content-Length`` body, bounded in size and time) and hands it to ``handler(conn, request)``. The
handler writes whatever it likes through :class:`Conn`, which counts the bytes the kernel accepted
and gives up when the client has gone, stopped reading (a send timeout) or the server is stopping.
After the handler returns the connection is closed: one request per connection.

Everything is bounded: the accept loop by ``max_seconds`` and ``max_requests`` (connections past it
are closed unanswered), a request by ``read_timeout`` and ``MAX_REQUEST_BYTES``, a trickle by its own
time limit and by the server stopping. Leaving the ``with`` block stops the server, closes every
socket it opened and joins its threads (with a timeout), so an old client that hangs on a trickle is
released as soon as its test ends.

Waiting is on events (:meth:`HostileServer.wait_for_requests`, ``stopping.wait``), never on sleeps,
except for the pacing of a trickle, which is itself an ``Event.wait``.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: Largest request (headers and body) a server reads; anything bigger is cut off.
MAX_REQUEST_BYTES = 4 << 20
MiB = 1 << 20


@dataclass
class Request:
    """One request as the server read it."""

    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes
    raw_head: bytes
    index: int = 0

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query, keep_blank_values=True)

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class ConnectionRecord:
    """What happened on one accepted connection."""

    bytes_sent: int = 0
    peer_gone: bool = False
    stalled: bool = False
    request: Request | None = None


class Conn:
    """The handler's side of one connection: sends that count bytes and stop when they should."""

    def __init__(self, server: HostileServer, sock: socket.socket, record: ConnectionRecord) -> None:
        self.server = server
        self.sock = sock
        self.record = record

    @property
    def alive(self) -> bool:
        return not (self.record.peer_gone or self.record.stalled or self.server.stopping.is_set())

    def send(self, data: bytes) -> bool:
        """Send all of ``data``; ``False`` (and stop) once the client is gone or stopped reading."""
        view = memoryview(data)
        while view:
            if not self.alive:
                return False
            try:
                sent = self.sock.send(view[: 256 << 10])
            except TimeoutError:
                self.record.stalled = True
                return False
            except OSError:
                self.record.peer_gone = True
                return False
            self.server._count(self.record, sent)
            view = view[sent:]
        return True

    def head(
        self,
        status: int,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        *,
        reason: str | None = None,
    ) -> bool:
        """Status line and headers (``Connection: close`` added), nothing else."""
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        if not any(k.lower() == "connection" for k, _ in pairs):
            pairs.append(("Connection", "close"))
        return self.send(head_bytes(status, pairs, reason=reason))

    def answer(
        self,
        status: int,
        body: bytes | str | Mapping[str, Any] | list[Any] = b"",
        headers: Mapping[str, str] | None = None,
        *,
        content_type: str | None = None,
    ) -> bool:
        """A complete answer with ``Content-Length``; a dict or list body is sent as JSON."""
        data, kind = encode_body(body)
        all_headers = {"Content-Type": content_type or kind, "Content-Length": str(len(data))}
        all_headers.update(headers or {})
        return self.head(status, all_headers) and self.send(data)

    def trickle(self, data: bytes, interval: float, *, max_seconds: float = 60.0) -> bool:
        """Send ``data`` one byte every ``interval`` seconds, for at most ``max_seconds``.

        Stops (``False``) when the client is gone, the server stops or the time is up.
        """
        ends = time.monotonic() + max_seconds
        for index in range(len(data)):
            if not self.send(data[index : index + 1]):
                return False
            if index == len(data) - 1:
                break
            if time.monotonic() >= ends or self.server.stopping.wait(interval):
                return False
        return True

    def hold(self, max_seconds: float = 60.0) -> None:
        """Say nothing until the client closes, the server stops or ``max_seconds`` pass."""
        ends = time.monotonic() + max_seconds
        while not self.server.stopping.is_set() and time.monotonic() < ends:
            self.sock.settimeout(0.2)
            try:
                if not self.sock.recv(65536):
                    self.record.peer_gone = True
                    return
            except TimeoutError:
                continue
            except OSError:
                self.record.peer_gone = True
                return

    def stream(self, total: int, *, chunk: bytes = b"x" * (64 << 10)) -> bool:
        """Send ``total`` bytes of a repeated pattern without ever holding them in memory."""
        left = total
        while left > 0:
            piece = chunk if left >= len(chunk) else chunk[:left]
            if not self.send(piece):
                return False
            left -= len(piece)
        return True


Handler = Callable[[Conn, Request], None]


class HostileServer:
    """A threaded raw-socket HTTP server on 127.0.0.1; see the module docstring.

    :param handler: ``handler(conn, request)`` scripts the answer to each request.
    :param max_requests: requests answered; later connections are closed at once (``capped``).
    :param max_seconds: lifetime of the accept loop.
    :param send_timeout: a send blocked this long means the client stopped reading; the connection is
        then given up (``stalled``).
    :param sndbuf: ``SO_SNDBUF`` of accepted sockets (small values keep the bytes a client never read
        but the kernel accepted to a few hundred KiB, so ``bytes_sent`` is close to what was read).
    :param read_timeout: longest wait for a request's bytes.
    :param close_on_accept: close every connection as soon as it is accepted, before reading anything
        (``handler`` is never called; ``connections`` counts them).
    """

    def __init__(
        self,
        handler: Handler,
        *,
        max_requests: int = 500,
        max_seconds: float = 60.0,
        send_timeout: float = 2.0,
        sndbuf: int | None = None,
        read_timeout: float = 10.0,
        close_on_accept: bool = False,
    ) -> None:
        self.handler = handler
        self.close_on_accept = close_on_accept
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self.send_timeout = send_timeout
        self.sndbuf = sndbuf
        self.read_timeout = read_timeout
        self.stopping = threading.Event()
        self.requests: list[Request] = []
        self.connections: list[ConnectionRecord] = []
        self.errors: list[BaseException] = []
        self.capped = False
        self.port = 0
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._socks: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._accepter: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileServer:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._wake = socket.socketpair()
        self._accepter = threading.Thread(target=self._accept_loop, name=f"hostile-{self.port}", daemon=True)
        self._accepter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop accepting, release every connection, join the threads (at most a few seconds)."""
        self.stopping.set()
        if self._wake is not None:
            with contextlib.suppress(OSError):
                self._wake[1].send(b"x")
        if self._accepter is not None:
            self._accepter.join(5)
        with self._cond:
            socks = list(self._socks)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        ends = time.monotonic() + 5
        for thread in list(self._threads):
            thread.join(max(0.0, ends - time.monotonic()))
        for sock in socks:
            sock.close()
        if self._listener is not None:
            self._listener.close()
        if self._wake is not None:
            for sock in self._wake:
                sock.close()
            self._wake = None

    # -- counters ------------------------------------------------------------------------------------

    def _counted(self, count: Callable[[], int]) -> int:
        """``count()`` under the lock the serving threads record under."""
        with self._cond:
            return count()

    @property
    def request_count(self) -> int:
        return self._counted(lambda: len(self.requests))

    @property
    def bytes_sent(self) -> int:
        return self._counted(lambda: sum(c.bytes_sent for c in self.connections))

    @property
    def connection_count(self) -> int:
        return self._counted(lambda: len(self.connections))

    @property
    def max_bytes_per_connection(self) -> int:
        return self._counted(lambda: max((c.bytes_sent for c in self.connections), default=0))

    def wait_for_requests(self, count: int, timeout: float) -> bool:
        """Block until ``count`` requests arrived (``True``) or ``timeout`` passed (``False``)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.requests) >= count, timeout)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every connection's handler has finished (so the counters are final)."""
        ends = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, ends - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _count(self, record: ConnectionRecord, sent: int) -> None:
        with self._cond:
            record.bytes_sent += sent

    # -- serving -------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._listener is not None and self._wake is not None
        ends = time.monotonic() + self.max_seconds
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake[0], selectors.EVENT_READ)
            while not self.stopping.is_set():
                remaining = ends - time.monotonic()
                if remaining <= 0:
                    return
                for key, _ in selector.select(remaining):
                    if key.fileobj is not self._listener:
                        return
                    try:
                        sock, _ = self._listener.accept()
                    except OSError:
                        continue
                    with self._cond:
                        self._socks.add(sock)
                        record = ConnectionRecord()
                        self.connections.append(record)
                    thread = threading.Thread(target=self._serve, args=(sock, record), daemon=True)
                    self._threads.append(thread)
                    thread.start()

    def _serve(self, sock: socket.socket, record: ConnectionRecord) -> None:
        try:
            if self.close_on_accept:
                return
            if self.sndbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            request = read_request(sock, self.read_timeout, self.stopping)
            if request is None:
                return
            with self._cond:
                request.index = len(self.requests)
                if request.index >= self.max_requests:
                    self.capped = True
                    return
                self.requests.append(request)
                record.request = request
                self._cond.notify_all()
            sock.settimeout(self.send_timeout)
            self.handler(Conn(self, sock, record), request)
        except Exception as exc:  # a handler bug shows in .errors, never as a hung thread
            self.errors.append(exc)
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            sock.close()
            with self._cond:
                self._socks.discard(sock)


def read_request(sock: socket.socket, timeout: float, stopping: threading.Event) -> Request | None:
    """One request: head up to the blank line, then a ``Content-Length`` body; ``None`` if none came."""
    ends = time.monotonic() + timeout
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_REQUEST_BYTES:
            return None
        chunk = _receive(sock, ends, stopping)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    while len(body) < min(length, MAX_REQUEST_BYTES):
        chunk = _receive(sock, ends, stopping)
        if chunk is None:
            return None
        if not chunk:
            break
        body += chunk
    return Request(parts[0], parts[1], parts[2], headers, body, head)


def _receive(sock: socket.socket, ends: float, stopping: threading.Event) -> bytes | None:
    """The next bytes of a request (``b""`` once the client closed); ``None`` on time-out, stop or error."""
    while True:
        remaining = ends - time.monotonic()
        if remaining <= 0 or stopping.is_set():
            return None
        sock.settimeout(min(remaining, 1.0))
        try:
            return sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return None


# --- building answers ---------------------------------------------------------------------------------


def head_bytes(status: int, headers: Iterable[tuple[str, str]], *, reason: str | None = None) -> bytes:
    if reason is None:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Whatever"
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def encode_body(body: bytes | str | Mapping[str, Any] | list[Any]) -> tuple[bytes, str]:
    """Bytes and a content type for an answer body."""
    if isinstance(body, bytes):
        return body, "application/json"
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body).encode(), "application/json"


def error_body(
    code: int,
    status: str,
    message: str,
    violations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The service's documented error body."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if violations is not None:
        error["details"] = [{"fieldViolations": violations}]
    return {"error": error}


def refuse(conn: Conn, req: Request) -> None:
    """The handler of an origin that must not be called (the API, while a test downloads elsewhere)."""
    conn.answer(500, error_body(500, "INTERNAL", "must not be called"))


def page(key: str, items: list[dict[str, Any]], token: str) -> dict[str, Any]:
    return {key: items, "nextPageToken": token}


def deep_array(depth: int) -> bytes:
    """``[[[...]]]`` nested ``depth`` deep (2 bytes a level)."""
    return b"[" * depth + b"]" * depth


def deep_in_object(key: str, depth: int) -> bytes:
    """``{"<key>": [[[...]]]}``: the right top-level shape, a hostile value."""
    return b'{"' + key.encode() + b'": ' + deep_array(depth) + b"}"


def deep_error(depth: int) -> bytes:
    """An error body whose ``details`` nest ``depth`` deep."""
    return b'{"error": {"code": 400, "message": "m", "status": "INVALID_ARGUMENT", "details": ' + (
        deep_array(depth) + b"}}"
    )


@dataclass
class Tokens:
    """Page tokens handed out by a listing server, for tests that count or cycle them."""

    issued: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fresh(self) -> str:
        with self.lock:
            token = f"tok-{len(self.issued):06d}"
            self.issued.append(token)
            return token


def item_key(req: Request) -> str:
    """The array an answer carries its items in, by the request's path (a listing, or an add)."""
    if req.path.endswith("/accounts/add"):
        return "successfulAccounts"
    for fragment, key in (
        ("/folders", "folders"),
        ("/executions", "exportJobExecutions"),
        ("/accountLists", "lists"),
    ):
        if fragment in req.path:
            return key
    return "items"
