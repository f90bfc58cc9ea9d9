"""Helpers for the crash-safety and bad-input tests: warehouse targets in a database of their own, a
storage origin on 127.0.0.1.

The export files and the expectations are ``support.export_files``'s, computed independently of the
loader (plain ``csv`` and ``decimal``), so a test that compares the loader's table with them can fail;
a task killed for real is ``support.processes.run_until_killed`` (re-exported here for the tests that
import it from this module).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from support.export_files import TACTIC_COLUMNS, normalise
from support.postgres import conn_env, dsn, unusable
from support.processes import run_until_killed
from support.warehouses import Warehouse

__all__ = [
    "PG_DSN",
    "StorageHandler",
    "Target",
    "duckdb_target",
    "pg_schemas",
    "postgres_target",
    "run_until_killed",
    "serve",
]

#: The crash tests' own PostgreSQL database, so they never touch another suite's tables.
PG_DATABASE = "abm_crash"
PG_DSN = dsn(PG_DATABASE)


# --- warehouse targets ----------------------------------------------------------------------------


class Target(Warehouse):
    """A table in one warehouse, reached by the operators through an Airflow connection id set in the
    environment, and read back here with the database's own driver (never through the hooks)."""

    def __init__(self, kind: str, conn_id: str, table: str, duckdb_path: Path | None = None) -> None:
        super().__init__(kind, conn_id, table)
        self.duckdb_path = duckdb_path

    def operator_kwargs(self, **extra: Any) -> dict[str, Any]:
        return {"sql_conn_id": self.conn_id, "table": self.table, **extra}

    def connect(self) -> Any:
        if self.kind == "duckdb":
            import duckdb

            return duckdb.connect(str(self.duckdb_path))
        import psycopg

        return psycopg.connect(PG_DSN)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with closing(self.connect()) as conn:
            cur = conn.cursor()
            cur.execute(sql)
            return list(cur.fetchall())

    def exists(self, table: str | None = None) -> bool:
        name = table or self.table
        schema, _, bare = name.rpartition(".")
        where = f"table_schema = '{schema}'" if schema else "table_schema = current_schema()"
        rows = self.query(f"SELECT 1 FROM information_schema.tables WHERE {where} AND table_name = '{bare}'")
        return bool(rows)

    def rows(self) -> list[tuple[Any, ...]]:
        """Every row with every data column and the execution id, sorted: duplicates stay visible."""
        if not self.exists():
            return []
        columns = ", ".join(f'"{c}"' for c in [*TACTIC_COLUMNS, "_execution_id"])
        raw = self.query(f"SELECT {columns} FROM {self.table}")
        out = [
            tuple(normalise(c, v) for c, v in zip(TACTIC_COLUMNS, r[:-1], strict=True)) + (r[-1],)
            for r in raw
        ]
        return sorted(out, key=repr)

    def ledger_rows(self) -> list[tuple[Any, ...]]:
        """The ledger's rows (table, execution, digest and counts), oldest first; none without a ledger."""
        if not self.exists(self.ledger):
            return []
        return self.query(
            "SELECT target_table, execution_id, sha256, rows_loaded, rows_deleted, rows_rejected "
            f"FROM {self.ledger} ORDER BY loaded_at"
        )


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def duckdb_target(path: Path, monkeypatch: pytest.MonkeyPatch, name: str = "crash_duckdb") -> Target:
    monkeypatch.setenv(_env_name(name), json.dumps({"conn_type": "duckdb", "host": str(path)}))
    return Target("duckdb", name, "tactic_perf", duckdb_path=path)


@pytest.fixture
def pg_schemas() -> Iterator[Any]:
    """A factory of fresh schemas in the crash database, all dropped after the test."""
    reason = unusable(PG_DATABASE, create=True)
    if reason:
        pytest.skip(reason)
    import psycopg

    made: list[str] = []

    def make() -> str:
        schema = f"crash_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        made.append(schema)
        return schema

    yield make
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        for schema in made:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_target(schema: str, monkeypatch: pytest.MonkeyPatch, name: str = "crash_pg") -> Target:
    monkeypatch.setenv(_env_name(name), conn_env(PG_DATABASE))
    return Target("postgres", name, f"{schema}.tactic_perf")


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
