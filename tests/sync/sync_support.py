"""Support of the list-sync tests: a warehouse on DuckDB or PostgreSQL, read with its own driver.

A module of its own (not ``conftest``) so the tests import it by a name no other test folder uses.

Each test gets its own DuckDB file or its own PostgreSQL schema, reached through the Airflow connection
``abm_warehouse`` set in the environment, and a ``Warehouse`` that reads and writes it with the
database's own driver (never through the code under test).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from typing import Any

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

    def replace_table(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """(Re)create ``table`` as text columns holding ``rows``, in bulk."""
        name = self.name(table)
        with closing(self._connect()) as conn:
            cur = conn.cursor()
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            cur.execute(f"CREATE TABLE {name} ({', '.join(f'{c} VARCHAR' for c in columns)})")
            if rows and self.kind == "duckdb":
                import pyarrow as pa

                data = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
                conn.register("rows_in", data)
                conn.execute(f"INSERT INTO {name} SELECT * FROM rows_in")
            elif rows:
                with cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            conn.commit()
