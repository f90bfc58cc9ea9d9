"""Helpers for the crash-safety and bad-input tests: their warehouses, a storage origin on 127.0.0.1.

The warehouses are ``support.warehouses``'s, in the crash tests' own PostgreSQL database
(:data:`~support.warehouses.CRASH`), read back with the database's own driver. The export files and
the expectations are ``support.export_files``'s, computed independently of the loader (plain ``csv``
and ``decimal``), so a test that compares the loader's table with them can fail; a task killed for
real is ``support.processes.run_until_killed`` (re-exported here for the tests that import it from
this module).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.processes import run_until_killed
from support.warehouses import CRASH, Warehouse, postgres_schema

__all__ = [
    "StorageHandler",
    "duckdb_target",
    "pg_schemas",
    "postgres_target",
    "run_until_killed",
    "serve",
]


# --- warehouse targets ----------------------------------------------------------------------------


def duckdb_target(
    path: Path, monkeypatch: pytest.MonkeyPatch, conn_id: str = CRASH.connection("duckdb")
) -> Warehouse:
    """The DuckDB file ``path`` as the connection ``conn_id``, for the test."""
    return Warehouse("duckdb", conn_id, path).use(monkeypatch)


@pytest.fixture
def pg_schemas() -> Iterator[Callable[[], str]]:
    """A factory of fresh schemas in the crash tests' database, all dropped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda: stack.enter_context(postgres_schema(CRASH))


def postgres_target(
    schema: str, monkeypatch: pytest.MonkeyPatch, conn_id: str = CRASH.connection("postgres")
) -> Warehouse:
    """``schema`` of the crash tests' database as the connection ``conn_id``, for the test."""
    return Warehouse("postgres", conn_id, CRASH.database, schema=schema).use(monkeypatch)


# --- a storage origin on 127.0.0.1 ------------------------------------------------------------------


class StorageHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ``body`` as ``content_type``, 200 (206 for a ``Range``), with its length
    and an ETag; at ``rate`` bytes a second when set (a remote store's speed), and counts the requests.

    The pacing waits on ``stopping``, which :func:`serve` sets on the way out, so no handler thread
    outlives its test.
    """

    body = b""
    content_type = "text/csv"
    rate: float | None = None
    served = 0
    stopping = threading.Event()
    url = ""

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        cls = type(self)
        cls.served += 1
        body, start = cls.body, 0
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            start = int(ranged[6:].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", cls.content_type)
        self.send_header("Content-Length", str(len(body) - start))
        self.send_header("ETag", f'"{hashlib.sha1(body, usedforsecurity=False).hexdigest()}"')
        self.end_headers()
        began, piece = time.monotonic(), 256 << 10
        with contextlib.suppress(OSError):
            for offset in range(start, len(body), piece):
                self.wfile.write(body[offset : offset + piece])
                if cls.rate:
                    due = began + (offset + piece - start) / cls.rate
                    if cls.stopping.wait(max(due - time.monotonic(), 0)):
                        return

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(path: str = "/export.csv") -> Iterator[type[StorageHandler]]:
    """A fresh :class:`StorageHandler` class served on 127.0.0.1; its ``url`` points at ``path``."""
    handler = type("Storage", (StorageHandler,), {"stopping": threading.Event(), "served": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    try:
        yield handler
    finally:
        handler.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
