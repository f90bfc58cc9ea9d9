"""The warehouses of the loader tests, with their fixtures: a DuckDB file, a real PostgreSQL (a schema of
its own per test), a real MariaDB (a database of its own per test), and the generic path against
PostgreSQL and SQLite (a connection type no dialect is registered for).

The generic path runs twice: against PostgreSQL (``method="generic"``) and against SQLite through a
minimal common-sql ``DbApiHook`` (the SQLite provider is not installed), so it is exercised on a
driver with a different parameter style and no native types. A folder's ``conftest`` imports the
fixtures it needs from here by name.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.sql.hooks.sql import DbApiHook

from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import table_contents
from support.postgres import conn_env, dsn, unusable

PG_DSN = dsn()
MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "connect_timeout": 3}


def mysql_conn_env(database: str = "test") -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON) for a ``mysql`` connection to ``database`` on the test MariaDB."""
    return json.dumps(
        {"conn_type": "mysql", "host": "127.0.0.1", "port": 3306, "login": "root", "schema": database}
    )


def duckdb_conn_env(path: Path, **extra: Any) -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON) for a ``duckdb`` connection to the file at ``path``."""
    return json.dumps({"conn_type": "duckdb", "host": str(path), "extra": extra})


def require_postgres() -> None:
    """Skip the test, saying why, when the test PostgreSQL does not answer."""
    reason = unusable()
    if reason:
        pytest.skip(reason)


def _mariadb() -> Any:
    """A connection to the test MariaDB's server; the test is skipped, saying why, when it does not answer."""
    import MySQLdb  # the [mysql] extra: a missing driver is a failed install, not a reason to skip

    try:
        return MySQLdb.connect(**MARIADB)
    except MySQLdb.OperationalError as exc:
        pytest.skip(f"MariaDB at 127.0.0.1:3306 (user root, no password) is not reachable: {exc}")


@pytest.fixture
def mariadb_database() -> Iterator[str]:
    """A database of its own on the test MariaDB, dropped after the test."""
    name = f"abm_load_{uuid.uuid4().hex[:10]}"
    with closing(_mariadb()) as conn:
        conn.cursor().execute(f"CREATE DATABASE `{name}`")
    yield name
    with closing(_mariadb()) as conn:
        conn.cursor().execute(f"DROP DATABASE `{name}`")


class SqliteTestHook(DbApiHook):
    """A common-sql hook over a SQLite file, standing in for "any other DbApiHook"."""

    conn_name_attr = "sqlite_conn_id"
    default_conn_name = "sqlite_default"
    conn_type = "sqlite"
    placeholder = "?"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def get_conn(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path)


def ledger_of(table: str) -> str:
    """The load ledger beside ``table``: in its schema, or unqualified."""
    schema, _, _ = table.rpartition(".")
    return f"{schema}.abm_load_ledger" if schema else "abm_load_ledger"


class Warehouse:
    """One target for a test: builds operators against it and reads the table and ledger back."""

    def __init__(self, kind: str, conn_id: str, table: str, method: str = "auto", hook: Any = None) -> None:
        self.kind = kind
        self.conn_id = conn_id
        self.table = table
        self.method = method
        self._hook = hook
        self.ledger = ledger_of(table)

    def operator(self, **kwargs: Any) -> ExecutionCsvToSqlOperator:
        kwargs.setdefault("task_id", f"load_{uuid.uuid4().hex[:6]}")
        kwargs.setdefault("table", self.table)
        op = ExecutionCsvToSqlOperator(sql_conn_id=self.conn_id, method=self.method, **kwargs)
        if self._hook is not None:
            op.get_db_hook = lambda: self._hook  # type: ignore[method-assign]
        return op

    def hook(self) -> Any:
        if self._hook is not None:
            return self._hook
        if self.kind == "duckdb":
            from airflow.providers.duckdb.hooks.duckdb import DuckDBHook

            return DuckDBHook(duckdb_conn_id=self.conn_id)
        if self.kind == "mariadb":
            from airflow.providers.mysql.hooks.mysql import MySqlHook

            return MySqlHook(mysql_conn_id=self.conn_id)
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        return PostgresHook(postgres_conn_id=self.conn_id)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with closing(self.hook().get_conn()) as conn:
            cur = conn.cursor()
            cur.execute(sql)
            return list(cur.fetchall())

    def contents(self, export_type: str = "TACTIC_PERFORMANCE") -> dict[tuple[str, ...], tuple[Any, ...]]:
        with closing(self.hook().get_conn()) as conn:
            return table_contents(conn.cursor(), self.table, export_type)

    def exists(self) -> bool:
        try:
            self.query(f"SELECT 1 FROM {self.table} WHERE 1 = 0")
        except Exception:
            return False
        return True

    def ledger_rows(self) -> list[tuple[Any, ...]]:
        return self.query(
            f"SELECT execution_id, sha256, rows_loaded, rows_deleted, rows_rejected FROM {self.ledger} "
            "ORDER BY loaded_at, rows_loaded"
        )


@pytest.fixture(scope="module")
def pg_conn() -> Iterator[Any]:
    """An autocommit connection to the test PostgreSQL, for checks that need no table of their own."""
    require_postgres()
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        yield conn


@pytest.fixture
def pg_schema() -> Iterator[str]:
    require_postgres()
    import psycopg

    schema = f"abm_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    yield schema
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def make_warehouse(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> Warehouse:
    if kind == "duckdb":
        monkeypatch.setenv("AIRFLOW_CONN_WH_DUCKDB", duckdb_conn_env(tmp_path / "wh.duckdb"))
        return Warehouse(kind, "wh_duckdb", "tactic_perf", "auto")
    if kind == "sqlite":
        # "auto": no dialect is registered for SQLite, so the registry gives it the generic path.
        return Warehouse(
            kind, "wh_sqlite", "tactic_perf", "auto", hook=SqliteTestHook(tmp_path / "wh.sqlite")
        )
    if kind == "mariadb":
        database = request.getfixturevalue("mariadb_database")
        monkeypatch.setenv("AIRFLOW_CONN_WH_MYSQL", mysql_conn_env())
        return Warehouse(kind, "wh_mysql", f"{database}.tactic_perf", "auto")
    schema = request.getfixturevalue("pg_schema")
    monkeypatch.setenv("AIRFLOW_CONN_WH_PG", conn_env())
    return Warehouse(
        kind, "wh_pg", f"{schema}.tactic_perf", "generic" if kind == "postgres_generic" else "auto"
    )


@pytest.fixture(params=["duckdb", "postgres", "postgres_generic", "sqlite", "mariadb"])
def warehouse(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Warehouse:
    return make_warehouse(request.param, tmp_path, monkeypatch, request)


@pytest.fixture(params=["duckdb", "postgres"])
def native_warehouse(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Warehouse:
    return make_warehouse(request.param, tmp_path, monkeypatch, request)
