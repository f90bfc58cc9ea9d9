"""``abm_provider.warehouse.ledger``: the load ledger's statements, run on real databases.

One row per committed load says "this execution and this file are in this table", and orders the
loads of one table by the execution's time. Each statement is run here on SQLite (the generic path's
stand-in) and DuckDB, and on PostgreSQL and MariaDB when they answer, and judged by the rows it
finds: a re-run of the same file is found (an unknown execution id only by an unknown one), an
execution whatever its file, the newest execution newer than the loading one (by each execution's
latest row, never one without a time, never the loading one itself), and an older ledger gets its
missing column.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import pytest

from abm_provider.warehouse.dialects.base import Dialect
from abm_provider.warehouse.dialects.duckdb import DuckDBDialect
from abm_provider.warehouse.dialects.generic import GenericDialect
from abm_provider.warehouse.dialects.mysql import MySQLDialect
from abm_provider.warehouse.dialects.postgres import PostgresDialect
from abm_provider.warehouse.ledger import (
    ADDED_COLUMNS,
    LEDGER_COLUMNS,
    LedgerEntry,
    add_column_sql,
    create_sql,
    find_execution_sql,
    find_sql,
    insert_sql,
    missing_columns,
    newer_ids_sql,
    newer_params,
    newer_sql,
)
from abm_provider.warehouse.schema import TableName
from support.warehouses import LOADS, SqliteTestHook, Warehouse, mariadb_database, postgres_schema

T = [dt.datetime(2026, 10, day, 6, 0) for day in range(1, 8)]  # T[0] < T[1] < ... (naive UTC)


class Database:
    """One connection, the warehouse's dialect, and how it binds a timestamp."""

    def __init__(self, kind: str, conn: Any, d: Dialect, ledger: TableName) -> None:
        self.kind, self.conn, self.d, self.ledger = kind, conn, d, ledger
        self.table = d.table_sql(ledger)

    def bind(self, value: Any) -> Any:
        # sqlite3 has no TIMESTAMP: the generic loader binds the canonical text, as here.
        if self.kind == "sqlite" and isinstance(value, dt.datetime):
            return value.isoformat(sep=" ")
        return value

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.cursor().execute(sql, [self.bind(p) for p in params])

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()
        cur.execute(sql, [self.bind(p) for p in params])
        return [tuple(row) for row in cur.fetchall()]

    def time(self, value: Any) -> dt.datetime | None:
        """A timestamp as the database returned it, as a ``datetime``."""
        return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


@pytest.fixture(params=["sqlite", "duckdb", "postgres", "mariadb"])
def db(request: Any, tmp_path: Path) -> Iterator[Database]:
    """One connection to a database of the test's own: a file, a PostgreSQL schema, a MariaDB database."""
    kind = request.param
    with ExitStack() as stack:
        if kind in ("sqlite", "duckdb"):
            warehouse = Warehouse(kind, "ledger", tmp_path / f"ledger.{kind}")
        elif kind == "postgres":
            schema = stack.enter_context(postgres_schema())
            warehouse = Warehouse(kind, "ledger", LOADS.database, schema=schema)
        else:
            database = stack.enter_context(mariadb_database())
            warehouse = Warehouse(kind, "ledger", database, schema=database)
        dialect = {
            "sqlite": lambda: GenericDialect(SqliteTestHook(tmp_path / "unused.sqlite")),
            "duckdb": lambda: DuckDBDialect(None),
            "postgres": lambda: PostgresDialect(None),
            "mariadb": lambda: MySQLDialect(None),
        }[kind]()
        conn = stack.enter_context(closing(warehouse.connect(autocommit=True)))
        yield Database(kind, conn, dialect, TableName(warehouse.schema, "abm_load_ledger"))


def entry(
    table: str, execution_id: str | None, sha256: str, loaded_at: dt.datetime, **more: Any
) -> LedgerEntry:
    return LedgerEntry(
        target_table=table,
        execution_id=execution_id,
        export_type="TACTIC_PERFORMANCE",
        sha256=sha256,
        source=f"/data/{execution_id}.csv",
        bytes=100,
        rows_loaded=more.pop("rows_loaded", 10),
        rows_deleted=0,
        rows_rejected=0,
        loaded_at=loaded_at,
        method="test",
        **more,
    )


def record(db: Database, *entries: LedgerEntry) -> None:
    db.execute(create_sql(db.d, db.ledger))
    for one in entries:
        db.execute(insert_sql(db.d, db.ledger), one.values())


def test_the_ledger_is_created_once_with_its_columns_and_takes_an_entry(db: Database) -> None:
    record(db, entry("t", "e1", "aa", T[0], execution_time=T[1]))
    db.execute(create_sql(db.d, db.ledger))  # again: no error, nothing lost
    everything = db.rows(f"SELECT * FROM {db.table}")
    assert len(everything) == 1 and len(everything[0]) == len(LEDGER_COLUMNS)
    (row,) = db.rows(
        f"SELECT target_table, execution_id, sha256, rows_loaded, execution_time FROM {db.table}"
    )
    assert row[:4] == ("t", "e1", "aa", 10) and db.time(row[4]) == T[1]


def test_a_file_loaded_before_is_found_newest_first_and_an_unknown_execution_only_as_unknown(
    db: Database,
) -> None:
    record(
        db,
        entry("t", "e1", "aa", T[0], rows_loaded=1),
        entry("t", "e1", "aa", T[2], rows_loaded=2),
        entry("t", None, "aa", T[1], rows_loaded=3),
        entry("other", "e1", "aa", T[3], rows_loaded=4),
        entry("t", "e1", "bb", T[4], rows_loaded=5),
    )
    find = find_sql(db.d, db.ledger)
    assert [r[1] for r in db.rows(find, ["t", "aa", "e1", "e1"])] == [2, 1]
    assert [r[1] for r in db.rows(find, ["t", "aa", None, None])] == [3], "NULL execution ids compare equal"
    assert db.rows(find, ["t", "cc", "e1", "e1"]) == []
    assert db.rows(find, ["t", "aa", "e9", "e9"]) == []


def test_an_execution_is_found_whatever_its_file(db: Database) -> None:
    record(db, entry("t", "e1", "aa", T[0]), entry("t", "e1", "bb", T[1]), entry("u", "e1", "aa", T[2]))
    found = db.rows(find_execution_sql(db.d, db.ledger), ["t", "e1"])
    assert [r[2] for r in found] == ["bb", "aa"]
    assert db.rows(find_execution_sql(db.d, db.ledger), ["t", "e2"]) == []


@pytest.fixture
def history(db: Database) -> Database:
    """Loads of table ``t`` (and one of ``u``): e1 at T1, e2 at T3, e5 at T5 then restated to T0, e4 with no
    time, e6 at T6 into another table."""
    record(
        db,
        entry("t", "e1", "a1", T[0], execution_time=T[1]),
        entry("t", "e2", "a2", T[1], execution_time=T[3]),
        entry("t", "e5", "a5", T[2], execution_time=T[5]),
        entry("t", "e5", "b5", T[3], execution_time=T[0]),  # its latest row is what counts
        entry("t", "e4", "a4", T[4]),
        entry("u", "e6", "a6", T[5], execution_time=T[6]),
    )
    return db


def newer(db: Database, execution_time: dt.datetime | None, execution_id: str | None) -> list[Any]:
    params = newer_params("t", execution_time, execution_id)
    newest = [(r[0], db.time(r[1])) for r in db.rows(newer_sql(db.d, db.ledger), params)]
    ids = db.rows(f"SELECT execution_id FROM ({newer_ids_sql(db.d, db.ledger)}) ids", params)
    return [newest, sorted(r[0] for r in ids)]


def test_the_newest_newer_execution_by_each_executions_latest_row(history: Database) -> None:
    assert newer(history, T[0], "e9") == [[("e2", T[3])], ["e1", "e2"]]
    assert newer(history, T[2], "e9") == [[("e2", T[3])], ["e2"]]


def test_nothing_is_newer_than_the_newest_nor_than_itself(history: Database) -> None:
    assert newer(history, T[4], "e9") == [[], []]
    assert newer(history, T[0], "e2") == [[("e1", T[1])], ["e1"]], (
        "the loading execution is not newer than itself"
    )


def test_a_load_with_no_time_finds_nothing_newer_and_a_row_with_no_time_is_never_newer(
    history: Database,
) -> None:
    assert newer(history, None, "e9") == [[], []]
    assert newer(history, None, None) == [[], []]
    assert "e4" not in newer(history, T[0], None)[1]


def test_an_older_ledger_is_told_and_given_its_missing_column(db: Database) -> None:
    old = [(name, kind) for name, kind in LEDGER_COLUMNS if (name, kind) not in ADDED_COLUMNS]
    db.execute(f"CREATE TABLE {db.table} ({', '.join(f'{n} {k}' for n, k in old)})")
    existing = [name.upper() for name, _ in old]  # a dialect may report names in capitals
    assert missing_columns(existing) == list(ADDED_COLUMNS)
    assert missing_columns([name for name, _ in LEDGER_COLUMNS]) == []

    for name, kind in missing_columns(existing):
        db.execute(add_column_sql(db.d, db.ledger, name, kind))
        # Another load that migrated the same ledger meanwhile is no error.
        if db.d.capabilities.add_column_if_not_exists:
            db.execute(add_column_sql(db.d, db.ledger, name, kind))
    record(db, entry("t", "e1", "a1", T[0], execution_time=T[2]))
    assert newer(db, T[1], "e9") == [[("e1", T[2])], ["e1"]]
