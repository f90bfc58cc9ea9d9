"""Snowflake: the file as numbered Parquet, ``PUT`` to the stage table's own stage, then ``COPY INTO``.

Why Parquet: Snowflake's bulk path reads staged files, in parallel and in no order, so the record
number the rejects and repeated keys need has to be in the file (:mod:`abm_provider.warehouse.numbered`).
Every column goes as text exactly as written, as ``COPY ... FROM STDIN`` stages it on PostgreSQL, and
the rules then run in SQL (``UPDATE ... SET _reason``), unless the Arrow pre-scan
(:mod:`abm_provider.warehouse.prescan`), run on a thread while the files are written and uploaded,
found that every record passes. The file format is given on the ``COPY`` itself (a format set on a
stage is easy to change behind the load's back). The stage table is ``TEMPORARY``, so its stage and
its rows go with the session, and two loads never share one.

Identifiers are folded as Snowflake folds unquoted names: to upper case. A file's ``campaign_name``
is the column ``CAMPAIGN_NAME``, which SQL written without quotes finds; the loader still quotes
every name. Types: ``NUMBER(18,2)`` for money, ``NUMBER(38,0)`` (``BIGINT``) for counts, ``DATE``,
and ``TIMESTAMP_NTZ`` for the load times, which are naive UTC.

Transactions: the connection runs with autocommit off, so the delete, the insert and the ledger row
commit together. Snowflake commits an open transaction before and after a DDL statement, so a new
table, a new ledger or an added column commits first (``transactional_ddl=False``) and the flow then
takes the lock again and asks the ledger again. So there is no one-pass load into a new table.

Concurrency: Snowflake has no advisory locks. The load updates its row of a lock table
(:data:`LOCK_TABLE`, beside the target) in its replace transaction: an ``UPDATE`` locks the table
until the transaction ends, so the replace steps of two loads into one schema take turns (staging,
most of a load, still runs in parallel). A waiting load waits up to the session's ``LOCK_TIMEOUT``.
"""

from __future__ import annotations

import datetime as dt
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse.dialects.base import Staged
from abm_provider.warehouse.dialects.capabilities import Capabilities
from abm_provider.warehouse.dialects.options import NoOptions
from abm_provider.warehouse.dialects.stripping import regexp_stripped_sql
from abm_provider.warehouse.numbered import RECORD_COLUMN, write_numbered
from abm_provider.warehouse.prescan import KeyOrder, day_set, prescan_file
from abm_provider.warehouse.rules_sql import SqlValidated
from abm_provider.warehouse.schema import STAGE_TABLE, Kind, TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest
    from abm_provider.warehouse.stream import IncomingFile

#: The table whose rows the loads of a schema lock in their replace transaction, one row per target.
LOCK_TABLE = "ABM_LOAD_LOCKS"
#: How a standard type is spelled here; a type not named is Snowflake's own already.
_TYPES = {"TEXT": "VARCHAR", "TIMESTAMP": "TIMESTAMP_NTZ", "DECIMAL(18,2)": "NUMBER(18,2)"}
#: DB-API type codes of text (the connector's FIELD_TYPES: 2 is TEXT).
_TEXT_CODES = frozenset({"2"})


class SnowflakeDialect(SqlValidated):
    name = "snowflake"
    options_type = NoOptions
    capabilities = Capabilities(
        bulk_path="snowflake_copy",
        table_lock="sessions",  # an UPDATE of the lock table's row, held until the commit
        session_locks=False,  # nothing a session keeps across its transactions
        names_lock_holder=False,
        direct_new_table=False,  # DDL commits: a table created for a one-pass load could not be undone
        stream_readers=0,
        unique_key_index=False,  # Snowflake does not enforce keys; the load's lock keeps one row per key
        add_column_if_not_exists=True,
        rules_in_sql=True,
        full_outer_join=True,
        param_style="format",  # the connector's default pyformat binding, positional %s
        temporary_tables=True,
        multi_statement_transactions=True,  # for DML: DDL commits by itself
        delete_using_join=False,
        transactional_ddl=False,
        lock_rows=True,
        strips_like_python=True,
    )
    text_type_codes = _TEXT_CODES
    current_schema_sql = "CURRENT_SCHEMA()"

    # ---- spelling ------------------------------------------------------------------------------

    def quote(self, name: str) -> str:
        # As Snowflake folds an unquoted name, so the table and its columns are found without quotes.
        return super().quote(name.upper())

    def type_sql(self, sql_type: str) -> str:
        return _TYPES.get(sql_type, sql_type)

    def text_sql(self, length: int | None = None) -> str:
        return f"VARCHAR({length})" if length else "VARCHAR"

    def cast_sql(self, expression: str, sql_type: str) -> str:
        return f"CAST({expression} AS {self.type_sql(sql_type)})"

    def strip_sql(self, expression: str) -> str:
        # TRIM takes a set of characters too, but fakesnow ignores it, so no test could show it.
        return regexp_stripped_sql(expression)

    def matches_sql(self, column: str, pattern: str) -> str | None:
        # REGEXP_LIKE matches the whole text. A backslash in a string literal is an escape here, so
        # the one escaped character of the loader's rules, the decimal point, goes as a class; a
        # pattern with any other escape (the list sync's control characters) is checked in Python.
        posix = pattern.replace("\\.", "[.]")
        if "\\" in posix or "'" in posix:
            return None
        return f"REGEXP_LIKE({column}, '{posix}')"

    def valid_sql(self, column: str, kind: Kind) -> str:
        check = self.matches_sql(column, str(kind.pattern))
        if check is None:
            raise ValueError(f"the rule of {kind.value} columns has an escape Snowflake's literals change")
        if kind is Kind.DATE:  # the pattern bounds month and day; the calendar says whether 02-30 is one
            check = f"({check} AND TRY_TO_DATE({column}, 'YYYY-MM-DD') IS NOT NULL)"
        return check

    # ---- connection, catalog and lock ----------------------------------------------------------

    def connect(self) -> Any:
        conn = self.hook.get_conn()
        conn.autocommit(False)
        return conn

    def table_columns(self, conn: Any, cur: Any, table: TableName) -> list[str] | None:
        # Names as the loader spells them: a folded (all upper case) name is read back in lower case.
        cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = COALESCE(%s, CURRENT_SCHEMA()) AND table_name = %s "
            "ORDER BY ordinal_position",
            [table.schema.upper() if table.schema else None, table.name.upper()],
        )
        names = [str(r[0]) for r in cur.fetchall()]
        return [_unfolded(n) for n in names] or None

    def lock(self, cur: Any, table: TableName) -> None:
        locks = self.table_sql(TableName(table.schema, LOCK_TABLE))
        key = str(table).upper()
        # Created and given the table's row outside the replace transaction (DDL would commit it).
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {locks} (TARGET_TABLE VARCHAR NOT NULL, LOCKED_AT TIMESTAMP_NTZ)"
        )
        cur.execute(
            f"INSERT INTO {locks} (TARGET_TABLE) SELECT %s WHERE NOT EXISTS "
            f"(SELECT 1 FROM {locks} WHERE TARGET_TABLE = %s)",
            [key, key],
        )
        cur.connection.commit()
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        cur.execute(f"UPDATE {locks} SET LOCKED_AT = %s WHERE TARGET_TABLE = %s", [now, key])

    # ---- the bulk path -------------------------------------------------------------------------

    def stage(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str, incoming: IncomingFile
    ) -> Staged:
        incoming.wait_for_download()  # the files are written from the whole export
        columns = ", ".join(f"{self.quote(n)} VARCHAR" for n in plan.header)
        cur.execute(
            f"CREATE OR REPLACE TEMPORARY TABLE {STAGE_TABLE} "
            f"({RECORD_COLUMN} NUMBER(38,0), {columns}, _reason VARCHAR)"
        )
        stop = threading.Event()
        order = KeyOrder()
        days = day_set(request, plan)
        with ThreadPoolExecutor(1, thread_name_prefix="abm-prescan") as pool:
            prescan = pool.submit(prescan_file, request, plan, stop, order, days)
            try:
                rows, rejects = self._copy(cur, request, plan)
            except BaseException:
                stop.set()
                raise
            passed = prescan.result()
        all_pass = not rejects and passed is not None and passed == rows
        if all_pass:
            self.log.info("Every one of the %d records passed the column rules (Arrow pre-scan)", rows)
        else:
            cur.execute(f"UPDATE {STAGE_TABLE} SET _reason = {reason_sql} WHERE ({reason_sql}) IS NOT NULL")
        return Staged(
            rejects=rejects,
            rules_checked=all_pass,
            keys_unique=all_pass and order.increasing,
            days=tuple(sorted(days.values)) if all_pass and days is not None else None,
        )

    def _copy(self, cur: Any, request: LoadRequest, plan: ColumnPlan) -> tuple[int, dict[int, str]]:
        """Write the numbered Parquet files, ``PUT`` them to the stage table's stage, ``COPY`` them in.

        Returns the rows copied and the records the files could not hold (malformed).
        """
        with tempfile.TemporaryDirectory(prefix="abm-snowflake-") as folder:
            files = write_numbered(request.path, plan.header, Path(folder), log=self.log)
            for path in files.paths:
                cur.execute(f"PUT 'file://{path}' @%{STAGE_TABLE} AUTO_COMPRESS=FALSE OVERWRITE=TRUE")
                cur.fetchall()
            self.log.info(
                "Uploaded %d Parquet file(s) of %s to Snowflake", len(files.paths), request.path.name
            )
        names = [RECORD_COLUMN, *plan.header]
        targets = ", ".join([RECORD_COLUMN, *(self.quote(n) for n in plan.header)])
        fields = ", ".join(f'$1:"{n}"' for n in names)
        cur.execute(
            f"COPY INTO {STAGE_TABLE} ({targets}) FROM (SELECT {fields} FROM @%{STAGE_TABLE}) "
            "FILE_FORMAT=(TYPE=PARQUET)"
        )
        copied = sum(_rows_loaded(row) for row in cur.fetchall())
        if copied != files.rows:
            raise RuntimeError(
                f"COPY INTO {STAGE_TABLE} loaded {copied} rows of {request.path.name}, but the staged files "
                f"hold {files.rows}"
            )
        return copied, dict(files.rejects)

    def described_columns(self, cur: Any, relation: str) -> list[tuple[str, bool]]:
        return [(_unfolded(n), text) for n, text in super().described_columns(cur, relation)]


def _unfolded(name: str) -> str:
    """A name as the loader spells it: one Snowflake folded to upper case, read back in lower case."""
    return name.lower() if name == name.upper() else name


def _rows_loaded(row: Sequence[Any]) -> int:
    """The ``rows_loaded`` of one file's row of a ``COPY`` result (file, status, parsed, loaded...)."""
    return int(row[3]) if len(row) > 3 and row[3] is not None else 0
