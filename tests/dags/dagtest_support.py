"""Helpers for the DAG tests: the warehouse reader, DAG loading and XCom reading.

A module of its own (not ``conftest``) so test files import it by a name no other test folder uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from typing import Any

from smoke.smoke_support import load_dag, task_states

__all__ = [
    "PG_DATABASE",
    "TABLES",
    "Warehouse",
    "ensure_postgres_database",
    "load_dag",
    "task_states",
    "xcom",
]

PG_DATABASE = "abm_dagtest"
PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PG_DSN = f"host=127.0.0.1 port=5432 user=postgres dbname={PG_DATABASE} connect_timeout=3"
#: Every table the two DAGs and the loader create, dropped before each PostgreSQL test.
TABLES = (
    "abm_tactic_performance",
    "abm_load_ledger",
    "abm_target_accounts",
    "abm_sync_members",
    "abm_sync_plan",
    "abm_sync_rejects",
    "abm_sync_runs",
)


def ensure_postgres_database() -> str | None:
    """Create the tests' own database when missing; ``None`` when ready, else why it is not."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PG_DATABASE]).fetchone()
            if exists is None:
                conn.execute(f"CREATE DATABASE {PG_DATABASE}")
        return None
    except Exception as exc:
        return f"PostgreSQL at 127.0.0.1:5432 (user postgres) is not reachable or refused: {exc}"


class Warehouse:
    """The warehouse one test writes to, read back with the database's own driver (not the hooks)."""

    def __init__(self, kind: str, conn_env: str, location: str) -> None:
        self.kind = kind
        self.conn_env = conn_env
        self.location = location

    def _connect(self) -> Any:
        if self.kind == "duckdb":
            import duckdb

            return duckdb.connect(self.location)
        import psycopg

        return psycopg.connect(PG_DSN)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one query (``%s`` markers on both drivers); the connection is closed at once so DAG
        tasks find the DuckDB file unlocked."""
        if self.kind == "duckdb":
            sql = sql.replace("%s", "?")
        with closing(self._connect()) as conn:
            cur = conn.cursor()
            cur.execute(sql, list(params))
            return [tuple(row) for row in cur.fetchall()]

    def execute(self, sql: str, rows: Sequence[Sequence[Any]] | None = None) -> None:
        marker = "?" if self.kind == "duckdb" else "%s"
        with closing(self._connect()) as conn:
            cur = conn.cursor()
            if rows is None:
                cur.execute(sql)
            else:
                cur.executemany(sql.replace("%s", marker), [list(r) for r in rows])
            conn.commit()


def xcom(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    """A task's XCom from the metadata database, deserialised as a downstream task would see it."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        found = session.scalars(
            XComModel.get_many(run_id=dag_run.run_id, key=key, task_ids=task_id, dag_ids=dag_run.dag_id)
        ).first()
        if found is None:
            raise AssertionError(f"no XCom {key!r} for {task_id} in {dag_run.run_id}")
        return XComModel.deserialize_value(found)
