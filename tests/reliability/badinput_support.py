"""Helpers for the crash-safety and bad-input tests: export CSVs, warehouse targets, a killable child.

Kept apart from ``tests/transfers/loadtest_support.py`` on purpose: that module is importable only
when its folder is collected, and these tests must run on their own (``pytest tests/reliability``).
The expectations here are computed independently of the loader (plain ``csv`` and ``decimal``), so a
test that compares the loader's table with them can fail.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import hashlib
import http.server
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

TACTIC_COLUMNS = [
    "date",
    "campaign_id",
    "campaign_name",
    "tactic_id",
    "tactic_name",
    "impressions",
    "clicks",
    "spend",
]
TACTIC_KEY = ("date", "tactic_id")
COUNT_COLUMNS = frozenset({"impressions", "clicks", "page_views", "engaged_visitors"})
NAMES = ['Spring, "Launch"', "Café Münster", "two\nlines", "plain", "日本語"]

#: The crash tests' own PostgreSQL database, so they never touch another suite's tables.
PG_DATABASE = "abm_crash"
PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PG_DSN = f"host=127.0.0.1 port=5432 user=postgres dbname={PG_DATABASE} connect_timeout=3"


# --- export files ---------------------------------------------------------------------------------


def tactic_rows(first_day: dt.date, days: int, tactics: int, *, version: int) -> list[dict[str, str]]:
    """TACTIC_PERFORMANCE rows; another ``version`` restates every figure, as a later export does."""
    rows = []
    for offset in range(days):
        day = first_day + dt.timedelta(days=offset)
        for t in range(tactics):
            rng = random.Random(f"{version}/{day}/{t}")
            impressions = rng.randint(0, 100_000)
            rows.append(
                {
                    "date": day.isoformat(),
                    "campaign_id": f"c{t % 3}",
                    "campaign_name": NAMES[t % len(NAMES)],
                    "tactic_id": f"t{t}",
                    "tactic_name": f"{NAMES[(t + 2) % len(NAMES)]} #{t}",
                    "impressions": str(impressions),
                    "clicks": str(rng.randint(0, max(impressions // 10, 1))),
                    "spend": f"{rng.randint(0, 10_000_000) / 100:.2f}",
                }
            )
    return rows


def csv_line(row: Mapping[str, str], columns: Sequence[str] = TACTIC_COLUMNS, end: str = "\n") -> bytes:
    """One RFC 4180 record as bytes, ending in ``end``."""
    return csv_bytes([[row[c] for c in columns]], end)


def csv_bytes(records: Iterable[Sequence[str]], end: str = "\n") -> bytes:
    lines: list[str] = []

    class _Sink:
        def write(self, text: str) -> None:
            lines.append(text)

    writer = csv.writer(_Sink(), lineterminator=end)
    for record in records:
        writer.writerow(record)
    return "".join(lines).encode("utf-8")


def write_export(path: Path, rows: Iterable[Mapping[str, str]], *, extra: bytes = b"") -> Path:
    """Header, the rows, then ``extra`` raw bytes (bad records a test appends on purpose)."""
    data = csv_bytes([TACTIC_COLUMNS]) + b"".join(csv_line(r) for r in rows) + extra
    path.write_bytes(data)
    return path


def source_xcom(path: Path, execution_id: str, export_type: str = "TACTIC_PERFORMANCE") -> dict[str, Any]:
    """What the download operator hands the loader: path, size, checksum, execution id and type."""
    data = path.read_bytes()
    return {
        "path": str(path),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "execution_id": execution_id,
        "export_type": export_type,
    }


def normalise(column: str, value: Any) -> Any:
    """One comparable form for a CSV value and whatever a database returns for it."""
    if value is None or value == "":
        return None
    if column == "date":
        return value.isoformat() if isinstance(value, dt.date) else str(value)
    if column == "spend":
        return Decimal(str(value)).quantize(Decimal("0.01"))
    if column in COUNT_COLUMNS:
        return int(value)
    return str(value)


def expected_table(*loads: Iterable[Mapping[str, str]]) -> dict[tuple[str, ...], tuple[Any, ...]]:
    """One row per natural key; a later load's figures replace an earlier one's."""
    table: dict[tuple[str, ...], tuple[Any, ...]] = {}
    for rows in loads:
        for row in rows:
            table[tuple(row[k] for k in TACTIC_KEY)] = tuple(normalise(c, row[c]) for c in TACTIC_COLUMNS)
    return table


# --- warehouse targets ----------------------------------------------------------------------------


def postgres_reason() -> str | None:
    """``None`` when the crash database can be used (it is created when missing), else why not."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PG_DATABASE]).fetchone()
            if found is None:
                conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
        with psycopg.connect(PG_DSN):
            return None
    except Exception as exc:
        return f"PostgreSQL at 127.0.0.1:5432 (database {PG_DATABASE}, user postgres) is unusable: {exc}"


class Target:
    """A table in one warehouse reached through an Airflow connection id set in the environment."""

    def __init__(self, kind: str, conn_id: str, table: str, env: dict[str, str]) -> None:
        self.kind = kind
        self.conn_id = conn_id
        self.table = table
        self.env = env
        schema, _, _ = table.rpartition(".")
        self.ledger = f"{schema}.abm_load_ledger" if schema else "abm_load_ledger"

    def operator_kwargs(self, **extra: Any) -> dict[str, Any]:
        return {"sql_conn_id": self.conn_id, "table": self.table, **extra}

    def connect(self) -> Any:
        if self.kind == "duckdb":
            import duckdb

            return duckdb.connect(json.loads(self.env[_env_name(self.conn_id)])["host"])
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
        if not self.exists(self.ledger):
            return []
        return self.query(
            "SELECT target_table, execution_id, sha256, rows_loaded, rows_deleted, rows_rejected "
            f"FROM {self.ledger} ORDER BY loaded_at"
        )


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def duckdb_target(path: Path, monkeypatch: pytest.MonkeyPatch, name: str = "crash_duckdb") -> Target:
    value = json.dumps({"conn_type": "duckdb", "host": str(path)})
    monkeypatch.setenv(_env_name(name), value)
    return Target("duckdb", name, "tactic_perf", {_env_name(name): value})


@pytest.fixture
def pg_schemas() -> Iterator[Any]:
    """A factory of fresh schemas in the crash database, all dropped after the test."""
    reason = postgres_reason()
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
    value = json.dumps(
        {
            "conn_type": "postgres",
            "host": "127.0.0.1",
            "port": 5432,
            "login": "postgres",
            "schema": PG_DATABASE,
        }
    )
    monkeypatch.setenv(_env_name(name), value)
    return Target("postgres", name, f"{schema}.tactic_perf", {_env_name(name): value})


# --- a task process killed for real ---------------------------------------------------------------

_CHILD = """
import json, sys, time
from pathlib import Path
marker = Path(sys.argv[1])
def wait_to_be_killed():
    marker.write_text("ready")
    time.sleep(600)
{patch}
{body}
marker.write_text("finished")
"""


def run_until_killed(tmp_path: Path, patch: str, body: str, args: Mapping[str, Any]) -> None:
    """Run ``body`` in a fresh interpreter with ``patch`` applied and SIGKILL it at the patched point.

    The patch calls ``wait_to_be_killed()`` where the crash should land; the child then announces
    itself in a marker file and sleeps, and is killed with no chance to clean up (no ``finally``, no
    rollback, no atexit). ``body`` sees the JSON ``args`` as ``kwargs``.
    """
    marker = tmp_path / f"marker-{uuid.uuid4().hex[:8]}"
    script = _CHILD.format(
        patch=textwrap.dedent(patch), body="kwargs = json.loads(sys.argv[2])\n" + textwrap.dedent(body)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(marker), json.dumps(dict(args))],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() or marker.read_text() == "":
            if proc.poll() is not None:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                pytest.fail(f"the task exited before the crash point: {stderr[-3000:]}")
            assert time.monotonic() < deadline, "the task never reached the crash point"
            time.sleep(0.02)
        assert marker.read_text() == "ready", "the task finished instead of stopping at the crash point"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


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
