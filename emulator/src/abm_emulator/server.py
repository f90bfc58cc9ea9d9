"""Both origins in one process: two uvicorn servers sharing one asyncio loop and one `Emulator`.

Sockets are bound before the servers start so that port 0 resolves to real ports first: the storage
origin's URL goes into every ``downloadUri`` and the READY line must carry both URLs. Signal handling
is done here once for both servers (uvicorn's own handlers would only stop one of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn

from abm_emulator.api import create_api_app
from abm_emulator.asgi import ASGIApp
from abm_emulator.faults import FaultInjector, FaultMiddleware
from abm_emulator.ratelimit import RateLimiter, RateLimitMiddleware
from abm_emulator.requestlog import RequestBookkeeping, RequestLog
from abm_emulator.service import Emulator
from abm_emulator.storage import create_storage_app

log = logging.getLogger("abm_emulator")
TICK_SECONDS = 0.5


@dataclass
class Origins:
    api: ASGIApp
    storage: ASGIApp
    faults: FaultInjector
    request_log: RequestLog


def build_origins(emulator: Emulator, rate_limit: float | None) -> Origins:
    """The two ASGI apps, each wrapped (outermost first) in bookkeeping, faults and, for the API, limits."""
    faults = FaultInjector()
    request_log = RequestLog()
    limiter = RateLimiter(rate_limit) if rate_limit else None
    app = create_api_app(emulator)
    app.state.faults = faults
    app.state.request_log = request_log
    app.state.rate_limiter = limiter
    api: ASGIApp = app
    if limiter is not None:
        api = RateLimitMiddleware(api, limiter)
    clock = emulator.clock.now
    api = RequestBookkeeping(FaultMiddleware(api, "api", faults), "api", request_log, clock)
    storage_app: ASGIApp = create_storage_app(emulator.settings.data_dir, emulator.signer, clock)
    storage_faulted = FaultMiddleware(storage_app, "storage", faults)
    storage = RequestBookkeeping(storage_faulted, "storage", request_log, clock)
    return Origins(api, storage, faults, request_log)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to `serve_both`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _tick(emulator: Emulator, stop: asyncio.Event) -> None:
    """Let cron fires and state changes happen (and be persisted) even when nobody is asking."""
    while not stop.is_set():
        try:
            emulator.sync()
            await emulator.render_recent()
            emulator.flush()
        except Exception:
            log.exception("background tick failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), TICK_SECONDS)


async def serve_both(
    emulator: Emulator,
    origins: Origins,
    api_sock: socket.socket,
    storage_sock: socket.socket,
    on_ready: Callable[[], None],
    log_level: str = "warning",
) -> None:
    # date_header=False: uvicorn's Date is real time; `RequestBookkeeping` sets the emulated clock's.
    servers = [
        _Server(
            uvicorn.Config(
                app,
                log_level=log_level,
                lifespan="off",
                timeout_graceful_shutdown=3,
                access_log=False,
                date_header=False,
            )
        )
        for app in (origins.api, origins.storage)
    ]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def request_stop() -> None:
        stop.set()
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, request_stop)

    tasks = [
        asyncio.create_task(servers[0].serve(sockets=[api_sock])),
        asyncio.create_task(servers[1].serve(sockets=[storage_sock])),
    ]
    ticker = asyncio.create_task(_tick(emulator, stop))
    while not all(server.started for server in servers):
        if any(task.done() for task in tasks):
            request_stop()
            break
        await asyncio.sleep(0.01)
    else:
        on_ready()
    try:
        await asyncio.gather(*tasks)
    finally:
        request_stop()
        await ticker
        emulator.save()
