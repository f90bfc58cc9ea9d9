"""The two thin transports, ``requests`` for workers and ``aiohttp`` for the triggerer: each sends a
:class:`~._pipeline.Prepared` request within its total deadline, reads at most its bounded number
of body bytes (the rest is discarded unread), and turns every exception into an ``AbmApiError``.

``requests`` has only per-read timeouts, so a server trickling a byte a second would hold a call for
ever: its connections tell the running attempt which socket they use, and at the deadline a timer
shuts that socket down. They also check the address they reached against the URL rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import heapq
import http.client
import logging
import os
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from abm_provider.common.urls import Redactor, UnsafeUrlError, check_peer
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._pipeline import Answer, Prepared
from abm_provider.hooks.settings import AbmSettings

#: Connections one shared aiohttp session keeps open at most (aiohttp's own default).
CONNECTION_LIMIT = 100
_TLS_HINT = (
    'if the server uses a private CA, set the extra "ca_bundle" of the connection to the CA bundle path'
)
_attempt: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("abm_attempt", default=None)


def _mask_signed_links(record: logging.LogRecord) -> bool:
    """urllib3 logs every request's path and query at DEBUG; a pre-signed link's query is a credential."""
    if record.args:
        record.msg, record.args = Redactor()(record.getMessage()), ()
    return True


logging.getLogger("urllib3.connectionpool").addFilter(_mask_signed_links)


class Deadline:
    """The total deadline of one attempt: at ``seconds`` it shuts down the socket the attempt uses."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.ends = seconds, time.monotonic() + seconds
        self.expired = self.done = False
        self._conn: Any = None
        self._sock: Any = None
        self._lock = threading.Lock()

    def watch(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            # Kept apart: http.client drops ``conn.sock`` when an answer says "Connection: close".
            self._sock = getattr(conn, "sock", None) or self._sock
            if self.expired:
                self._shutdown()

    def expire(self) -> None:
        with self._lock:
            if not self.done:
                self.expired = True
                self._shutdown()

    def _shutdown(self) -> None:
        for sock in {id(s): s for s in (getattr(self._conn, "sock", None), self._sock) if s}.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Deadline:
        self._token = _attempt.set(self)
        _watchdog.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.done = True
        _attempt.reset(self._token)


class _Watchdog:
    """One thread for the deadlines of every attempt in the process (a thread each cost more than the
    request); made again in a forked child, where the parent's thread does not exist."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Deadline]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline) -> None:
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="abm-deadlines", daemon=True)
                self._thread.start()
            heapq.heappush(self._due, (deadline.ends, id(deadline), deadline))
            if self._due[0][2] is deadline:
                self._wake.notify()

    def _run(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                while self._due and (self._due[0][2].done or self._due[0][0] <= now):
                    heapq.heappop(self._due)[2].expire()
                self._wake.wait(self._due[0][0] - now if self._due else None)


_watchdog = _Watchdog()
os.register_at_fork(after_in_child=_watchdog.__init__)  # type: ignore[misc]


class _Watched:
    """Mixed into urllib3's connections: report the socket to the attempt, check the peer address."""

    sock: Any
    scheme: str = "http"

    def connect(self) -> None:
        deadline = _attempt.get()
        if deadline is not None:
            deadline.watch(self)
        super().connect()  # type: ignore[misc]
        if deadline is not None:
            deadline.watch(self)
        peer = self.sock.getpeername()[0] if self.sock is not None else ""
        check_peer(str(peer), self.scheme, "the host")

    def request(self, *args: Any, **kwargs: Any) -> None:
        deadline = _attempt.get()
        if deadline is not None:
            deadline.watch(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_Watched, HTTPConnection):
    scheme = "http"


class _HTTPSConnection(_Watched, HTTPSConnection):
    scheme = "https"


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: urllib3 keeps the real cause in ``reason`` or ``args[0]``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        wrapped = (
            getattr(current, "reason", None),
            *current.args[:1],
            current.__cause__,
            current.__context__,
        )
        current = next((w for w in wrapped if isinstance(w, BaseException)), None)


#: Socket errors that ``http.client``'s own reads (which the download uses) raise as a plain ``OSError``.
_NETWORK_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "ECONNABORTED",
        "ECONNRESET",
        "ECONNREFUSED",
        "EHOSTDOWN",
        "EHOSTUNREACH",
        "ENETDOWN",
        "ENETRESET",
        "ENETUNREACH",
        "ENOTCONN",
        "EPIPE",
        "ESHUTDOWN",
        "ETIMEDOUT",
    )
    if hasattr(errno, name)
)


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the connection's failure, not the failure of the code reading the body.

    Why: the body of a download is read in a loop that also writes the file and feeds the load. A
    full disk (``ENOSPC``), the load's own cancel or a bug there must surface as what it is, not as
    "connection lost", which the retry policy would repeat onto the same full disk.
    """
    if isinstance(exc, (requests.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException)):
        return True
    if isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError, UnsafeUrlError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _NETWORK_ERRNOS


def _failure(exc: BaseException, deadline: Deadline, prepared: Prepared) -> AbmApiError:
    """What a ``requests`` exception means, as an ``AbmApiError`` of the right kind."""
    causes = list(_causes(exc))
    text = f"{type(causes[-1]).__name__}: {causes[-1]}"
    unsafe = [c for c in causes if isinstance(c, UnsafeUrlError)]
    if unsafe:
        return prepared.fail("unsafe_url", str(unsafe[0]), False)
    if deadline.expired:
        return prepared.fail("timeout", f"cut off after {deadline.seconds:g} s (request_timeout)")
    if isinstance(exc, requests.exceptions.SSLError) or any(isinstance(c, ssl.SSLError) for c in causes):
        return prepared.fail("tls", f"TLS failed ({text}); {_TLS_HINT}")
    sent = not isinstance(exc, requests.exceptions.ConnectTimeout) and not any(
        isinstance(c, (NewConnectionError, ConnectTimeoutError, ConnectionRefusedError)) for c in causes
    )
    return prepared.fail("lost" if sent else "connect", text, sent)


class RequestsTransport:
    """The sync transport: one ``requests`` session (keep-alive, TLS per the connection)."""

    def __init__(self, settings: AbmSettings) -> None:
        self.verify = settings.verify
        self.session = requests.Session()
        self.session.trust_env = True
        adapter = _Adapter()
        self.session.mount("https://", adapter)
        self.session.mount("http://", adapter)

    def close(self) -> None:
        self.session.close()

    @contextlib.contextmanager
    def stream(self, prepared: Prepared, total: float | None = None) -> Iterator[requests.Response]:
        """The open response of ``prepared`` within ``total`` seconds; the unread rest is discarded on the
        way out. A network failure in the block (body reads included), or any failure once the deadline
        cut the connection, becomes an ``AbmApiError``; anything else (a local write, the caller's own
        stop) is raised as it is (:func:`is_network_error`)."""
        deadline = Deadline(total or prepared.timeout)
        with deadline:
            try:
                response = self.session.request(
                    **prepared.request(),
                    stream=True,
                    timeout=(prepared.timeout, prepared.timeout),
                    # per request: requests lets REQUESTS_CA_BUNDLE override a session's verify
                    verify=self.verify,
                )
            except AbmApiError:
                raise
            except Exception as exc:
                raise _failure(exc, deadline, prepared) from None
            try:
                yield response
            except Exception as exc:
                if deadline.expired or is_network_error(exc):
                    raise _failure(exc, deadline, prepared) from None
                raise
            finally:
                response.close()
            if deadline.expired:  # the cut-off read looked like the end of the body
                raise _failure(TimeoutError(), deadline, prepared)

    def send(self, prepared: Prepared) -> Answer:
        with self.stream(prepared) as response:
            limit = prepared.max_body if response.status_code < 300 else prepared.max_error
            body = response.raw.read(limit + 1, decode_content=False) if limit >= 0 else b""
            return Answer(response.status_code, response.headers, body or b"")


# --- aiohttp -------------------------------------------------------------------------------------


@dataclass
class _Shared:
    session: Any
    users: int = 0


#: One aiohttp session per event loop and client settings: a triggerer polling for a thousand tasks
#: keeps one connection pool, not a thousand. Counted, so the last hook to close it closes it.
_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, _Shared]] = (
    weakref.WeakKeyDictionary()
)


def _checked_resolver() -> Any:
    """The default resolver, refusing names that resolve to a forbidden address."""
    import aiohttp

    class Resolver(aiohttp.ThreadedResolver):
        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> Any:
            hosts = await super().resolve(host, port, family)
            for found in hosts:
                check_peer(found["host"], "https", f"host {host!r}")
            return hosts

    return Resolver()


def open_sessions() -> int:
    """Sessions the running loop holds open (for tests and diagnostics)."""
    return len(_sessions.get(asyncio.get_running_loop(), {}))


class AiohttpTransport:
    """The async transport: a share of its event loop's ``aiohttp`` session."""

    def __init__(self, settings: AbmSettings) -> None:
        self.verify = settings.verify
        self._key: Hashable = (settings.verify,)
        self._session: Any = None

    def _acquire(self) -> Any:
        import aiohttp

        table = _sessions.setdefault(asyncio.get_running_loop(), {})
        shared = table.get(self._key)
        if shared is None or shared.session.closed:
            context: bool | ssl.SSLContext = self.verify if isinstance(self.verify, bool) else True
            if isinstance(self.verify, str):
                context = ssl.create_default_context(cafile=self.verify)
            connector = aiohttp.TCPConnector(
                ssl=context, limit=CONNECTION_LIMIT, resolver=_checked_resolver()
            )
            shared = table[self._key] = _Shared(
                aiohttp.ClientSession(connector=connector, auto_decompress=False)
            )
        shared.users += 1
        return shared.session

    async def close(self) -> None:
        """Give the shared session back; the last user on the loop closes it."""
        session, self._session = self._session, None
        if session is None:
            return
        table = _sessions.get(asyncio.get_running_loop(), {})
        shared = table.get(self._key)
        if shared is None or shared.session is not session:  # made on another loop, or replaced
            if not session.closed:
                await session.close()
            return
        shared.users -= 1
        if shared.users <= 0:
            del table[self._key]
            await session.close()

    async def send(self, prepared: Prepared) -> Answer:
        import aiohttp

        if self._session is None or self._session.closed:
            await self.close()
            self._session = self._acquire()
        limit = prepared.timeout
        timeout = aiohttp.ClientTimeout(total=limit, sock_connect=limit, sock_read=limit)
        try:
            async with self._session.request(**prepared.request(), timeout=timeout) as response:
                cap = prepared.max_body if response.status < 300 else prepared.max_error
                if response.content_length is not None and response.content_length <= cap:
                    return Answer(response.status, response.headers, await response.read())
                body = bytearray()
                while len(body) <= cap and (chunk := await response.content.read(cap + 1 - len(body))):
                    body += chunk
                response.close()  # the rest, if any, is not read
                return Answer(response.status, response.headers, bytes(body))
        except AbmApiError:
            raise
        except UnsafeUrlError as exc:
            raise prepared.fail("unsafe_url", str(exc), False) from None
        except TimeoutError:
            raise prepared.fail("timeout", f"cut off after {limit:g} s (request_timeout)") from None
        except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
            raise prepared.fail("tls", f"TLS failed ({exc}); {_TLS_HINT}") from None
        except aiohttp.ClientConnectorError as exc:
            raise prepared.fail("connect", f"{type(exc).__name__}: {exc}", False) from None
        except Exception as exc:
            raise prepared.fail("lost", f"{type(exc).__name__}: {exc}") from None
