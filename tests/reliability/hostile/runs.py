"""The set-up every hostile test shares: start a scripted server, name it in a connection, run one call.

``hostile`` (a fixture, see ``conftest.py``) is an :class:`Against`. Each of its calls starts the
server with ``handler``, makes a connection to it with ``settings`` as the connection's extra, runs
one call (the sync hook, the async hook, or a download whose API refuses every request and whose
link points at the server), stops the servers, and returns a :class:`Run`: the exception the call
raised (``None`` if it returned) or what it returned, the seconds it took, the servers (which keep
their records) and, with ``traced=True``, the peak of Python memory allocated during the call. With
``idle``, the server's handlers get that many seconds to finish before it is stopped, so its byte
counts are what the client let it send, not what the stop cut short. ``server`` passes options to
:class:`HostileServer`, ``hook`` arguments to the hook. The assertions stay in the tests
(``checks.assert_api_error`` and friends).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .checks import (
    afailure,
    async_call,
    atraced_peak,
    download_call,
    failure,
    signed_link,
    sync_call,
    traced_peak,
)
from .servers import Conn, HostileServer, Request, refuse

Handler = Callable[[Conn, Request], None]


@dataclass
class Run:
    """What one call against a hostile server came to."""

    err: Exception | None
    elapsed: float
    #: The scripted server: the API for a hook call, the storage origin for a download.
    server: HostileServer
    #: The API the connection names (for a download, one that refuses every request).
    api: HostileServer
    #: Python memory allocated during the call (``traced=True`` only).
    peak: int = 0
    #: What the call returned (``None`` when it raised).
    result: Any = None


def _measure(call: Callable[[], Any], traced: bool) -> tuple[Exception | None, float, int, Any]:
    returned: list[Any] = []
    kept = lambda: returned.append(call())  # noqa: E731
    err, elapsed, peak = traced_peak(kept) if traced else (*failure(kept), 0)
    return err, elapsed, peak, returned[0] if returned else None


async def _ameasure(
    call: Callable[[], Awaitable[Any]], traced: bool
) -> tuple[Exception | None, float, int, Any]:
    returned: list[Any] = []

    async def kept() -> None:
        returned.append(await call())

    err, elapsed, peak = await atraced_peak(kept) if traced else (*await afailure(kept), 0)
    return err, elapsed, peak, returned[0] if returned else None


#: The options of a run that are not the connection's settings, with their defaults.
_OPTIONS: dict[str, Any] = {"server": None, "hook": None, "traced": False, "idle": 0}


@contextlib.contextmanager
def _serving(handler: Handler, server: Mapping[str, Any] | None, idle: float) -> Iterator[HostileServer]:
    """A server answering with ``handler``; with ``idle``, its handlers may finish before it stops."""
    with HostileServer(handler, **(server or {})) as srv:
        yield srv
        if idle:
            srv.wait_idle(idle)


class Against:
    """Runs one call against a scripted server; see the module docstring."""

    def __init__(
        self,
        connect: Callable[..., str],
        operator_download: Callable[[str, str], Callable[[], Any]],
    ) -> None:
        self._connect = connect
        self._operator_download = operator_download

    def call(
        self,
        handler: Handler,
        name: str = "iter_folders",
        *,
        server: Mapping[str, Any] | None = None,
        hook: Mapping[str, Any] | None = None,
        traced: bool = False,
        idle: float = 0,
        **settings: Any,
    ) -> Run:
        """``AbmHook(conn).<name>`` against a server answering with ``handler``."""
        with _serving(handler, server, idle) as srv:
            measured = _measure(sync_call(self._connect(srv.url, **settings), name, **(hook or {})), traced)
        return Run(*measured[:2], srv, srv, *measured[2:])

    async def acall(self, handler: Handler, name: str = "iter_folders", **options: Any) -> Run:
        """The same with ``AbmAsyncHook``, taking the same options as :meth:`call`."""
        server, hook, traced, idle = (options.pop(k, d) for k, d in _OPTIONS.items())
        with _serving(handler, server, idle) as srv:
            call = async_call(self._connect(srv.url, **options), name, **(hook or {}))
            measured = await _ameasure(call, traced)
        return Run(*measured[:2], srv, srv, *measured[2:])

    def download(
        self,
        handler: Handler,
        *,
        operator: bool = False,
        server: Mapping[str, Any] | None = None,
        traced: bool = False,
        idle: float = 0,
        **settings: Any,
    ) -> Run:
        """``AbmHook.download`` (or, with ``operator``, the download operator) of a link on the server."""
        with HostileServer(refuse) as api, _serving(handler, server, idle) as storage:
            conn_id, link = self._connect(api.url, **settings), signed_link(storage.url)
            call = self._operator_download(conn_id, link) if operator else download_call(conn_id, link)
            measured = _measure(call, traced)
        return Run(*measured[:2], storage, api, *measured[2:])
