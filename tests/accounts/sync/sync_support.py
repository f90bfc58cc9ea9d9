"""Support of the list-sync tests: a warehouse on DuckDB, PostgreSQL or MariaDB, read with its own driver.

A module of its own (not ``conftest``) so the tests import it by a name no other test folder uses;
tests outside this folder (the concurrency tests in ``tests/reliability``) import it as
``accounts.sync.sync_support``. It also holds the helpers that build a list, run a sync and read the result.

Each test gets its own DuckDB file, its own PostgreSQL schema or its own MariaDB database, reached
through the Airflow connection ``abm_warehouse`` set in the environment, and a ``Warehouse`` that reads
and writes it with the database's own driver (never through the code under test).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from abm_provider.hooks.abm import AbmHook
from abm_provider.operators.account_lists import AccountListSyncOperator
from support.warehouses import MARIADB, mysql_conn_env

PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PG_DATABASE = "abm_synctest"
PG_DSN = f"host=127.0.0.1 port=5432 user=postgres dbname={PG_DATABASE} connect_timeout=3"
CONN_ID = "abm_warehouse"


def postgres_reason() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PG_DATABASE]).fetchone() is None:
                conn.execute(f"CREATE DATABASE {PG_DATABASE}")
        return None
    except Exception as exc:  # pragma: no cover - CI always has the server
        return f"PostgreSQL at 127.0.0.1:5432 is not reachable: {exc}"


class Warehouse:
    """One test's warehouse: ``schema`` is where its tables go (``None`` on DuckDB)."""

    def __init__(self, kind: str, location: str, schema: str | None) -> None:
        self.kind = kind
        self.location = location
        self.schema = schema

    def name(self, table: str) -> str:
        """``table`` qualified with this test's schema."""
        return f"{self.schema}.{table}" if self.schema else table

    def _connect(self) -> Any:
        if self.kind == "duckdb":
            import duckdb

            return duckdb.connect(self.location)
        if self.kind == "mariadb":
            import MySQLdb

            return MySQLdb.connect(**MARIADB, database=self.location, charset="utf8mb4")
        import psycopg

        return psycopg.connect(PG_DSN)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "duckdb":
            sql = sql.replace("%s", "?")
        with closing(self._connect()) as conn:
            cur = conn.cursor()
            cur.execute(sql, list(params))
            return [tuple(r) for r in cur.fetchall()]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        if self.kind == "duckdb":
            sql = sql.replace("%s", "?")
        with closing(self._connect()) as conn:
            conn.cursor().execute(sql, list(params))
            conn.commit()

    def replace_table(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, long_text: bool = False
    ) -> None:
        """(Re)create ``table`` as text columns of ``rows``, in bulk (``long_text``: over 255 chars)."""
        name = self.name(table)
        with closing(self._connect()) as conn:
            cur = conn.cursor()
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            text = ("TEXT" if long_text else "VARCHAR(255)") if self.kind == "mariadb" else "VARCHAR"
            cur.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {text}' for c in columns)})")
            if rows and self.kind == "duckdb":
                import pyarrow as pa

                data = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
                conn.register("rows_in", data)
                conn.execute(f"INSERT INTO {name} SELECT * FROM rows_in")
            elif rows and self.kind == "mariadb":
                marks = ", ".join("%s" for _ in columns)
                cur.executemany(f"INSERT INTO {name} VALUES ({marks})", [list(r) for r in rows])
            elif rows:
                with cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            conn.commit()


@contextmanager
def open_warehouse(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    """A fresh DuckDB file, PostgreSQL schema or MariaDB database as ``abm_warehouse``; skips when the
    server is down."""
    if kind == "mariadb":
        with _mariadb_database() as database:
            monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", mysql_conn_env(database))
            yield Warehouse("mariadb", database, database)
        return
    if kind == "duckdb":
        path = tmp_path / "warehouse.duckdb"
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "duckdb", "host": str(path)})
        )
        yield Warehouse("duckdb", str(path), None)
        return
    reason = postgres_reason()
    if reason:
        pytest.skip(reason)
    import psycopg

    schema = f"sync_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    conn_value = {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": 5432,
        "login": "postgres",
        "schema": PG_DATABASE,
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn_value))
    try:
        yield Warehouse("postgres", PG_DSN, schema)
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def _mariadb_database() -> Iterator[str]:
    """A database of its own on the test MariaDB (``abm_sync_<uuid>``), dropped after; skips when down."""
    import MySQLdb  # the [mysql] extra: a missing driver is a failed install, not a reason to skip

    try:
        admin = MySQLdb.connect(**MARIADB)
    except MySQLdb.OperationalError as exc:
        pytest.skip(f"MariaDB at 127.0.0.1:3306 (user root, no password) is not reachable: {exc}")
    name = f"abm_sync_{uuid.uuid4().hex[:12]}"
    with closing(admin):
        admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        yield name
    finally:
        with closing(MySQLdb.connect(**MARIADB)) as conn:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(params=["duckdb", "postgres", "mariadb"])
def warehouse(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Warehouse]:
    """A sync test's warehouse: its own DuckDB file, schema of the test PostgreSQL, or MariaDB database."""
    with open_warehouse(request.param, tmp_path, monkeypatch) as found:
        yield found


COLUMNS = ["account_id", "account_name", "crm_org_id"]
COLUMN_MAP = {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"}
ORG = "00D000000000001"


def account_id(n: int) -> str:
    return f"001{n:015d}"


def rows_for(numbers: range | list[int], org: str | None = ORG) -> list[tuple[str, str, str | None]]:
    return [(account_id(n), f"Account {n}", org) for n in numbers]


def context(run_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="sync_test", task_id="sync", run_id=run_id, try_number=1, map_index=-1)
    return {"ti": ti, "task_instance": ti, "run_id": run_id}


def make_list(name: str = "Targets") -> str:
    hook = AbmHook()
    folder = hook.ensure_folder("Sync tests")
    return str(hook.ensure_list(name, folder["folderId"])["listId"])


def source(warehouse: Warehouse, table: str = "targets") -> dict[str, str]:
    """The operator's argument that reads ``table`` of the warehouse (quoted as its dialect quotes)."""
    return {"table": warehouse.name(table)}


def operator(warehouse: Warehouse, list_id: str, **kwargs: Any) -> AccountListSyncOperator:
    if "table" in kwargs:
        kwargs.update(source(warehouse, kwargs.pop("table").removeprefix(f"{warehouse.schema}.")))
    elif "sql" not in kwargs:
        kwargs.update(source(warehouse))
    kwargs.setdefault("column_map", COLUMN_MAP)
    return AccountListSyncOperator(
        task_id="sync",
        list_id=list_id,
        sql_conn_id=CONN_ID,
        state_schema=warehouse.schema,
        max_attempts=1,
        **kwargs,
    )


def sync(warehouse: Warehouse, list_id: str, run_id: str, **kwargs: Any) -> dict[str, Any]:
    result: dict[str, Any] = operator(warehouse, list_id, **kwargs).execute(context(run_id))
    return result


def member_ids(abm: Any, list_id: str) -> set[str]:
    return {m["id"] for m in abm.members(list_id)}


def membership_requests(abm: Any) -> dict[str, int]:
    """Add and remove requests the service received since the log was last cleared."""
    counts = {"add": 0, "remove": 0}
    for seen in abm.requests_seen():
        path = str(seen.get("path", ""))
        for action in counts:
            if seen.get("method") == "POST" and path.endswith(f"/accounts/{action}"):
                counts[action] += 1
    return counts


def clear_requests(abm: Any) -> None:
    abm.admin("DELETE", "/_admin/requests")


def state_ids(warehouse: Warehouse, list_id: str) -> set[str]:
    rows = warehouse.query(
        f"SELECT account_id FROM {warehouse.name('abm_sync_members')} WHERE list_id = %s", [list_id]
    )
    return {r[0] for r in rows}
