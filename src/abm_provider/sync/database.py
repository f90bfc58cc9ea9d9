"""One connection to the state warehouse: bind-parameter SQL, transactions, and bulk staging.

The sync writes through one DB-API connection so its temporary source table and its transactions are
its own. The only per-database code is here: how a transaction opens (DuckDB's Python connection
commits each statement unless told otherwise) and how rows are staged in bulk (DuckDB reads an Arrow
table, PostgreSQL takes ``COPY``, anything else gets ``executemany`` in chunks).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from airflow.providers.common.sql.hooks.sql import DbApiHook
from airflow.sdk import BaseHook

from abm_provider.warehouse import dialect_of

log = logging.getLogger(__name__)


def sql_hook(conn_id: str, what: str, hook_params: dict[str, Any] | None = None) -> DbApiHook:
    """The common-sql hook of ``conn_id``; a clear error naming the setting when it is not one."""
    hook = BaseHook.get_connection(conn_id).get_hook(hook_params=hook_params or {})
    if not isinstance(hook, DbApiHook):
        raise TypeError(
            f"{what} {conn_id!r} resolves to {type(hook).__name__}, which is not a common-sql DbApiHook"
        )
    return hook


class StateDatabase:
    """The state warehouse, through one connection; ``?`` in SQL text is the bind marker."""

    def __init__(self, hook: DbApiHook) -> None:
        self.hook = hook
        self.dialect = dialect_of(hook)
        self.marker = str(hook.placeholder)
        self.conn: Any = hook.get_conn()
        self.cur: Any = self.conn.cursor() if self.dialect != "duckdb" else self.conn

    def close(self) -> None:
        """Close the connection, rolling back anything uncommitted first."""
        with suppress(Exception):
            self.conn.rollback()
        with suppress(Exception):
            self.conn.close()

    def sql(self, text: str) -> str:
        """Replace the ``?`` markers with the driver's own."""
        return text if self.marker == "?" else text.replace("?", self.marker)

    def execute(self, text: str, params: Sequence[Any] = ()) -> None:
        """Run one statement with bind parameters."""
        self.cur.execute(self.sql(text), list(params))

    def executemany(self, text: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each row of parameters."""
        if rows:
            self.cur.executemany(self.sql(text), [list(r) for r in rows])

    def rows(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """All rows of a query (callers keep results small: counts, one batch, a sample)."""
        self.execute(text, params)
        return [tuple(r) for r in self.cur.fetchall()]

    def value(self, text: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row, or ``None``."""
        found = self.rows(text, params)
        return found[0][0] if found else None

    def analyze(self, *tables: str) -> None:
        """Refresh PostgreSQL's statistics of tables just filled in bulk.

        Without it, the planner still believes a freshly filled plan table is empty and scans all of
        it for every batch recorded.
        """
        if self.dialect == "postgres":
            for table in tables:
                self.execute(f"ANALYZE {table}")
            self.conn.commit()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything inside commits together, or is rolled back when it raises."""
        if self.dialect == "duckdb":
            self.conn.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            with suppress(Exception):
                self.conn.rollback()
            raise
        self.conn.commit()

    def stage(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        """Append rows to ``table`` by the database's bulk path."""
        if not rows:
            return
        names = ", ".join(columns)
        if self.dialect == "duckdb":
            import pyarrow as pa

            chunk = pa.table({name: [row[i] for row in rows] for i, name in enumerate(columns)})
            self.conn.register("abm_sync_chunk", chunk)
            try:
                self.conn.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM abm_sync_chunk")
            finally:
                self.conn.unregister("abm_sync_chunk")
            return
        if self.dialect == "postgres" and hasattr(self.cur, "copy"):  # psycopg 3
            with self.cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        marks = ", ".join("?" for _ in columns)
        self.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
