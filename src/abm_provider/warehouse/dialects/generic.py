"""Any other common-sql ``DbApiHook``: Python reads and checks the file in chunks, ``executemany`` stages it.

This is the portable path, for warehouses without a bulk path this package knows. It reads the
file with the ``csv`` module, applies the same rules as the SQL paths in Python
(:func:`abm_provider.warehouse.schema.convert`), binds typed values and inserts ``chunk_rows`` rows
per ``executemany`` into a temporary table, so memory is bounded by one chunk. The replace step
is the same SQL as everywhere (one transaction: delete restated keys, insert, ledger row).

Best effort on concurrency: there is no portable lock statement, so two generic loads into one
table rely on the database's own transaction isolation; the unique index on the natural key turns
an interleaving that would duplicate a key into a failed (rolled back) load rather than a
duplicate row.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse.dialects.base import Dialect, Staged
from abm_provider.warehouse.dialects.capabilities import Capabilities
from abm_provider.warehouse.dialects.options import NoOptions
from abm_provider.warehouse.records import iter_records
from abm_provider.warehouse.schema import STAGE_TABLE, STANDARD_QUOTE, Kind, TableName, convert

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest
    from abm_provider.warehouse.stream import IncomingFile


def driver_quote_format(hook: Any) -> str:
    """How the connection quotes an identifier, as common-sql's ``escape_word_format`` (``"{}"``).

    A hook sets it for its SQL dialect (MySqlHook's is a backquote) and a connection extra can set it;
    common-sql's default, and ours without a connection, is standard SQL's double quote.
    """
    form = None
    with suppress(Exception):  # read from the connection's extra, which may not exist
        form = hook.escape_word_format
    return form if isinstance(form, str) and form.count("{}") == 1 else STANDARD_QUOTE


def driver_type_names(hook: Any) -> dict[str, str]:
    """The standard SQL types the hook's database names otherwise (``{"TEXT": "STRING"}``), from the
    hook's ``sql_type_names`` where it has one: the generic path's SQL is standard SQL otherwise."""
    names = getattr(hook, "sql_type_names", None)
    return {str(k).upper(): str(v) for k, v in names.items()} if isinstance(names, Mapping) else {}


class GenericDialect(Dialect):
    name = "generic"
    options_type = NoOptions
    capabilities = Capabilities(
        bulk_path="generic_executemany",
        table_lock="none",  # no portable lock: the loader says so, and the sync locks within the process
        session_locks=False,
        names_lock_holder=False,
        direct_new_table=False,
        stream_readers=0,
        unique_key_index=True,
        # SQLite and others lack it; the ledger is migrated once, under a check.
        add_column_if_not_exists=False,
        rules_in_sql=False,
        full_outer_join=False,
        param_style="hook",  # as the hook's placeholder says: any DB-API driver
        temporary_tables=True,
        multi_statement_transactions=True,
        delete_using_join=False,
        transactional_ddl=True,
        lock_rows=False,  # any DB-API database: nothing is known of its locking
        strips_like_python=False,  # standard SQL's TRIM takes off spaces only
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.quote_format = driver_quote_format(self.hook)
        self.type_names = driver_type_names(self.hook)

    def adapt(self, conn: Any, value: Any) -> Any:
        return _as_text(value) if _binds_text(conn) else value

    def param(self, sql_type: str) -> str:
        return self.placeholder

    def typed(self, column: str, kind: Kind) -> str:
        return column  # staged already typed

    def type_sql(self, sql_type: str) -> str:
        # Renamed as the hook says, its parameters kept: DECIMAL(18,2) may become NUMERIC(18,2).
        name, paren, rest = sql_type.partition("(")
        spelled = self.type_names.get(name.strip().upper())
        return f"{spelled}{paren}{rest}" if spelled else sql_type

    def text_sql(self, length: int | None = None) -> str:
        return self.type_sql(super().text_sql(length))

    def cast_sql(self, expression: str, sql_type: str) -> str:
        return f"CAST({expression} AS {self.type_sql(sql_type)})"

    def create_key_index(self, cur: Any, statement: str) -> None:
        # A database without indexes (Snowflake) refuses it: the load's rows are kept all the same,
        # under a savepoint where there is one, and the log says the table has no unique key.
        guarded = _try(cur, "SAVEPOINT abm_index")
        try:
            cur.execute(statement)
        except Exception as exc:
            if guarded:
                cur.execute("ROLLBACK TO SAVEPOINT abm_index")
            self.log.warning(
                "The database refused the natural key's unique index (%s); the table has none",
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
        finally:
            if guarded:
                cur.execute("RELEASE SAVEPOINT abm_index")

    def table_columns(self, conn: Any, cur: Any, table: TableName) -> list[str] | None:
        # Probing with a query is the one portable way to ask; the savepoint keeps a failed probe
        # from aborting the load's transaction (and its staged rows) on databases that abort on error.
        # A database without savepoints (Snowflake) refuses the statement, and a failed statement
        # there leaves the transaction as it was, so the probe runs without one.
        guarded = _try(cur, "SAVEPOINT abm_probe")
        try:
            cur.execute(f"SELECT * FROM {self.table_sql(table)} WHERE 1 = 0")
            names = [str(d[0]) for d in cur.description]
            cur.fetchall()
        except Exception:
            if guarded:
                cur.execute("ROLLBACK TO SAVEPOINT abm_probe")
            return None
        finally:
            if guarded:
                cur.execute("RELEASE SAVEPOINT abm_probe")
        return names

    def create_stage(self, cur: Any, plan: ColumnPlan, record_column: str = "_rec BIGINT") -> None:
        """The stage table, typed like the target, with the record number and ``_reason``."""
        columns = ", ".join(f"{self.quote(n)} {self.column_type(plan.kinds[n])}" for n in plan.header)
        try:
            cur.execute(f"DROP TABLE IF EXISTS {STAGE_TABLE}")
        except Exception:
            self.log.debug("no stale stage table to drop", exc_info=True)
        reason = self.type_sql("TEXT")
        cur.execute(f"CREATE TEMPORARY TABLE {STAGE_TABLE} ({record_column}, {columns}, _reason {reason})")

    def stage(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str, incoming: IncomingFile
    ) -> Staged:
        self.create_stage(cur, plan)
        return self.stage_checked(cur, request, plan)

    def stage_checked(self, cur: Any, request: LoadRequest, plan: ColumnPlan) -> Staged:
        """Read and check the file in Python, ``executemany`` the rows that pass into the stage."""
        names = ", ".join(["_rec", *(self.quote(n) for n in plan.header)])
        marks = ", ".join(self.placeholder for _ in range(len(plan.header) + 1))
        insert = f"INSERT INTO {STAGE_TABLE} ({names}) VALUES ({marks})"
        kinds = [plan.kinds[n] for n in plan.header]
        keys = {plan.header.index(k) for k in request.key_columns}
        text_only = _binds_text(cur)
        rejects: dict[int, str] = {}
        batch: list[list[Any]] = []
        staged, started = 0, time.monotonic()
        for record in iter_records(request.path, len(plan.header)):
            if record.error is not None or record.fields is None:
                rejects[record.number] = f"malformed record ({record.error})"
                continue
            row, reason = self._convert(record.fields, kinds, plan.header, keys, text_only)
            if reason is not None:
                rejects[record.number] = reason
                continue
            batch.append([record.number, *row])
            if len(batch) >= self.chunk_rows:
                cur.executemany(insert, batch)
                staged += len(batch)
                batch.clear()
                if staged % (self.chunk_rows * 50) == 0:
                    self.log.info(
                        "staged %d rows (%.0f rows/s)", staged, staged / (time.monotonic() - started)
                    )
        if batch:
            cur.executemany(insert, batch)
        # Rows breaking a rule were set aside above, never staged: no staged row has a ``_reason``.
        return Staged(rejects=rejects, rules_checked=True)

    def _convert(
        self, fields: list[str], kinds: list[Kind], header: Sequence[str], keys: set[int], text_only: bool
    ) -> tuple[list[Any], str | None]:
        row: list[Any] = []
        for index, (text, kind) in enumerate(zip(fields, kinds, strict=True)):
            if text == "":
                if index in keys:
                    return row, f"missing value in key column {header[index]}"
                row.append(None)
                continue
            try:
                value = convert(kind, text)
                row.append(_as_text(value) if text_only else value)
            except ValueError as exc:
                return row, f"column {header[index]}: {exc}, got {text}"
        return row, None


def _try(cur: Any, statement: str) -> bool:
    """Run ``statement``; ``False`` when the database refuses it."""
    try:
        cur.execute(statement)
    except Exception:
        return False
    return True


def _binds_text(conn: Any) -> bool:
    """Whether the driver of ``conn`` (a connection or a cursor) binds :func:`_as_text` values.

    sqlite3 has no DECIMAL, DATE or TIMESTAMP (and Python 3.12 deprecates its default date adapters);
    every other driver binds the Python value.
    """
    return isinstance(conn, (sqlite3.Connection, sqlite3.Cursor))


def _as_text(value: Any) -> Any:
    """A decimal, date or timestamp as its canonical text; anything else as it is."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    return value
