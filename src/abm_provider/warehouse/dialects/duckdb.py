"""DuckDB: the database reads the file itself, in parallel, with bounded memory.

``read_csv`` is given the header's columns explicitly (nothing is sniffed, so a file cannot change
how it is read) and reads them as VARCHAR; the shared rules of :mod:`abm_provider.warehouse.schema`
are evaluated on that text, and the values typed, in that same single statement. Reading the
columns typed instead would make DuckDB round ``1.005`` into ``DECIMAL(18,2)`` and accept date
spellings the other warehouses refuse, and a typed column's cast error would be reported as a
malformed line.

``store_rejects`` lets the read finish when a record cannot be split (wrong field count, broken
quote, bytes that are not UTF-8) and tells whether there was one. If so, or if DuckDB refuses the
file, or the file holds a carriage return (DuckDB 1.x mis-splits ``\r`` inside quoted fields, found
by the round-trip property test) or a NUL byte (DuckDB stores it in VARCHAR, PostgreSQL's text cannot
hold it, so the same record would load here and be rejected there), the file is staged again
through Python's ``csv`` module and
Arrow batches: the scanner the other paths use then decides structure and record numbers, so line
numbers in the rejects file are exact. Exports are machine-written, so the fast path is the norm.

Into a table that does not exist yet, one ``INSERT ... SELECT ... FROM read_csv`` first types the
values straight into the new table while the same rules are evaluated on the text: the first row
they reject stops it with ``error()``, as does a record DuckDB cannot split, and a ``GROUP BY`` then
looks for a repeated key. Any of those rolls it back and the file is staged as above. A clean file,
the usual first load or backfill, is so written once instead of twice.

Bounded memory: the dialect's options (:class:`DuckDBOptions`) ``memory_limit`` (default 1GB) and
``threads`` are set on the connection unless the DuckDB connection sets them itself (its extras
``memory_limit``, ``threads``, which the DuckDB hook applies when it opens the database), and DuckDB
spills to its temp directory past the limit. Staging keeps
insertion order (DuckDB's default) because the stage's ``rowid`` is how a rejected row is traced to
its line; the one-pass load into a new table needs no row numbers and drops it, which lets the
readers' threads write as they go instead of buffering to restore the file's order.

Concurrency: a DuckDB file has one writing process at a time (the file lock). Inside that process,
loads into one table take turns on an in-process lock (:meth:`DuckDBDialect.lock`, held by the load's
flow, not the dialect), kept from before the replace transaction reads anything until it ends, so
the later load sees the earlier one's rows and ledger row (the newest execution wins, see
:mod:`abm_provider.warehouse.flow`) instead of failing on a write conflict.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from abm_provider.common.arguments import check_whole
from abm_provider.warehouse.dialects.base import Filled, NewTable, ProcessLock, Staged
from abm_provider.warehouse.dialects.capabilities import Capabilities
from abm_provider.warehouse.dialects.stripping import stripped_class
from abm_provider.warehouse.records import iter_records
from abm_provider.warehouse.rules_sql import SqlValidated
from abm_provider.warehouse.schema import (
    EXECUTION_ID_COLUMN,
    LOADED_AT_COLUMN,
    STAGE_TABLE,
    Kind,
    TableName,
    quote,
)

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest
    from abm_provider.warehouse.stream import IncomingFile

_REJECTS_TABLE = "_abm_reject_errors"
_REJECTS_SCAN = "_abm_reject_scans"
_BATCH_ROWS = 50_000
#: The message of the ``error()`` that stops the one-pass load at a row the rules reject.
_RULE_BROKEN = "abm: a record breaks a column rule"
#: One lock per (database file, schema, table) of this process, for loads into that table.
_TABLE_LOCKS: dict[tuple[str, str, str], threading.Lock] = {}
_TABLE_LOCKS_GUARD = threading.Lock()
_FILE_LOCKED = re.compile(r'Could not set lock on file "(?P<path>[^"]*)".*?\(PID (?P<pid>\d+)\)', re.S)


def _table_lock(key: tuple[str, str, str]) -> threading.Lock:
    with _TABLE_LOCKS_GUARD:
        return _TABLE_LOCKS.setdefault(key, threading.Lock())


@dataclass(frozen=True, kw_only=True)
class DuckDBOptions:
    """DuckDB's settings for a load's connection, where the connection does not set them itself."""

    #: DuckDB's ``memory_limit`` (a size like ``1GB``); past it DuckDB spills to disk. ``None``:
    #: DuckDB's own default (most of the machine's memory).
    memory_limit: str | None = "1GB"
    #: DuckDB's ``threads``; ``None``: DuckDB's own default (one per core).
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.memory_limit is not None:
            _setting(self.memory_limit)
        if self.threads is not None:
            check_whole(self.threads, "dialect_options: threads of the duckdb dialect", 1)


class DuckDBDialect(SqlValidated):
    name = "duckdb"
    options_type = DuckDBOptions
    options: DuckDBOptions
    capabilities = Capabilities(
        bulk_path="duckdb_read_csv",
        # One process writes a DuckDB file: a lock of this process is a lock of every writer.
        table_lock="process",
        session_locks=False,
        names_lock_holder=False,
        direct_new_table=True,
        stream_readers=0,
        unique_key_index=False,
        add_column_if_not_exists=True,
        rules_in_sql=True,
        full_outer_join=True,
        param_style="qmark",
        temporary_tables=True,
        multi_statement_transactions=True,
        delete_using_join=False,
        transactional_ddl=True,
        lock_rows=True,
        strips_like_python=True,
    )
    lineage_schema = "main"  # common-sql's default answers "public", which DuckDB does not have
    catalog_where = "table_catalog = current_database() AND "
    # An ART index makes DuckDB bulk inserts slow and memory-hungry; the delete-then-insert under one
    # transaction and the duplicate rejection already keep one row per key.
    text_type_codes: ClassVar[frozenset[str]] = frozenset({"VARCHAR"})

    def growing_key_sql(self, columns: Sequence[str]) -> str:
        # DuckDB keeps a key as an ART index, whose blocks a bounded memory_limit must hold to insert
        # or delete a row, while its joins hash and its range reads skip by zone maps. The list sync
        # keeps its keys unique itself (its plan holds each key once and leaves members out).
        return ""

    def lineage_namespace(self) -> str | None:
        return f"duckdb://{self.hook.get_database()}"

    def strip_sql(self, expression: str) -> str:
        # trim() with a set of characters is ten times slower than one compiled expression (RE2).
        bracket = stripped_class("\\x{{{:04x}}}")
        return f"regexp_replace({expression}, '^{bracket}+|{bracket}+$', '', 'g')"

    def connect(self) -> Any:
        conn = self.hook.get_conn()
        options = self.options
        if getattr(self.hook, "memory_limit", None) is None and options.memory_limit:
            conn.execute(f"SET memory_limit = '{_setting(options.memory_limit)}'")
        if getattr(self.hook, "threads", None) is None and options.threads:
            conn.execute(f"SET threads = {int(options.threads)}")
        return conn

    def lock(self, cur: Any, table: TableName) -> ProcessLock:
        """Wait for the other loads of this process into ``table``; the caller releases it once the
        transaction has ended.

        Taken before ``BEGIN``, and so before the transaction's first statement, which is when DuckDB
        takes its snapshot: the load then reads what the previous holder committed.
        """
        path, schema = _database(cur)
        taken = _table_lock((path, table.schema or schema, table.name))
        taken.acquire()
        return taken

    def cursor(self, conn: Any) -> Any:
        # DuckDBPyConnection.cursor() opens a second connection with its own transaction; the load
        # must run on the connection itself so its temporary tables and transaction are shared.
        return conn

    def streaming_cursor(self, conn: Any) -> Any:
        # DuckDB fetches a result in chunks by itself; its cursor() would open a second connection.
        return conn

    def begin_transaction(self, cur: Any) -> None:
        # DuckDB's Python connection commits each statement unless a transaction is opened.
        cur.execute("BEGIN TRANSACTION")

    def begin_replace(self, conn: Any, cur: Any) -> None:
        # Staging runs before this, outside the transaction: rows a transaction appends carry transient
        # row ids, and the stage's committed row ids (0..n-1 in file order) are what map a rejected row
        # back to its record. The stage is a temporary table, so nobody else sees it either way.
        self.begin_transaction(cur)

    def identity(self, conn: Any) -> str:
        return f"duckdb:{_database(conn)[0]}"

    def file_locked(self, err: BaseException) -> tuple[str, int | None] | None:
        # A database file is opened for writing by one process at a time: the file is the lock
        # between processes, and a second opener gets ``IOException: Could not set lock on file``.
        match = _FILE_LOCKED.search(str(err))
        if match is None or type(err).__name__ != "IOException":
            return None
        return match.group("path"), int(match.group("pid"))

    def insert_rows(
        self, cur: Any, table_sql: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        import pyarrow as pa

        names = ", ".join(columns)
        chunk = pa.table({name: [row[i] for row in rows] for i, name in enumerate(columns)})
        cur.register("_abm_rows", chunk)
        try:
            cur.execute(f"INSERT INTO {table_sql} ({names}) SELECT {names} FROM _abm_rows")
        finally:
            cur.unregister("_abm_rows")

    def matches_sql(self, column: str, pattern: str) -> str:
        return f"regexp_full_match({column}, '{pattern}')"

    def valid_sql(self, column: str, kind: Kind) -> str:
        check = self.matches_sql(column, str(kind.pattern))
        if kind is Kind.DATE:
            check += f" AND TRY_CAST({column} AS DATE) IS NOT NULL"
        return check

    def fill_new_table(self, cur: Any, new: NewTable) -> Filled | None:
        import duckdb  # the [duckdb] extra: this module imports without it, the loader runs with it

        request = new.request
        if new.incoming.awkward_bytes():
            return None  # staging says why, and takes the Python path
        rules = self.reason_sql(new.plan, request.key_columns)
        cur.execute("SET preserve_insertion_order = false")
        try:
            cur.execute(
                direct_insert_sql(self.table_sql(request.table), new.plan, rules),
                [request.execution_id, new.loaded_at, str(request.path)],
            )
            rows = int(cur.fetchone()[0])
        except (duckdb.InvalidInputException, duckdb.ConversionException) as exc:
            first = str(exc).splitlines()[0]
            why = "a record breaks a column rule" if _RULE_BROKEN in first else first
            self.log.info("%s cannot be loaded in one pass (%s); staging it", request.path.name, why)
            return None
        return Filled(rows)

    def stage(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str, incoming: IncomingFile
    ) -> Staged:
        import duckdb

        cur.execute("SET preserve_insertion_order = true")
        cur.execute(f"DROP TABLE IF EXISTS {STAGE_TABLE}")
        awkward = incoming.awkward_bytes()
        if awkward:
            self.log.warning(
                "%s contains %s, which DuckDB's reader does not treat as the other warehouses do; it is "
                "staged through Python instead (slower)",
                request.path.name,
                awkward,
            )
            return self._stage_checked(cur, request, plan, reason_sql)
        try:
            cur.execute(
                f"CREATE TEMP TABLE {STAGE_TABLE} AS SELECT {_typed_columns(plan)}, {reason_sql} AS _reason "
                f"FROM {_read_csv(plan, store_rejects=True)}",
                [str(request.path)],
            )
        except duckdb.InvalidInputException as exc:
            self.log.warning(
                "DuckDB could not read %s (%s); staging it through Python", request.path.name, exc
            )
            return self._stage_checked(cur, request, plan, reason_sql)
        cur.execute(f"SELECT COUNT(*) FROM {_REJECTS_TABLE}")
        malformed = cur.fetchone()[0]
        if malformed:
            # DuckDB found records it cannot split. Its record count around them is not always the
            # one a CSV parser would give (it is a heuristic reader), so the Python scanner, which
            # every other path also uses, decides structure and numbering for this file.
            self.log.warning(
                "%d malformed record(s) in %s; staging it through Python to set them aside by line",
                malformed,
                request.path.name,
            )
            cur.execute(f"DROP TABLE {STAGE_TABLE}")
            return self._stage_checked(cur, request, plan, reason_sql)
        cur.execute(f"SELECT COUNT(*), COALESCE(MIN(rowid), 0), COALESCE(MAX(rowid), -1) FROM {STAGE_TABLE}")
        count, first, last = cur.fetchone()
        if (first, last) != (0, count - 1):
            raise RuntimeError(
                f"DuckDB staged {count} rows with row ids {first}..{last}, expected 0..{count - 1}"
            )
        return Staged(order_column="rowid", first_record=1)  # row i of the stage is record i + 1

    def _stage_checked(self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str) -> Staged:
        """Split records in Python, set malformed ones aside, and append the rest in Arrow batches."""
        import pyarrow as pa

        names = ["_rec", *plan.header]
        columns = ", ".join(f"{quote(n)} {plan.kinds[n].sql_type}" for n in plan.header)
        cur.execute(f"CREATE TEMP TABLE {STAGE_TABLE} (_rec BIGINT, {columns}, _reason VARCHAR)")
        selected = f"_rec, {_typed_columns(plan)}"
        structural: dict[int, str] = {}
        batch: list[list[Any]] = [[] for _ in names]

        def flush() -> None:
            if not batch[0]:
                return
            arrays = [pa.array(batch[0], pa.int64())] + [pa.array(c, pa.string()) for c in batch[1:]]
            cur.register("_abm_batch", pa.Table.from_arrays(arrays, names=names))
            cur.execute(f"INSERT INTO {STAGE_TABLE} SELECT {selected}, {reason_sql} FROM _abm_batch")
            cur.unregister("_abm_batch")
            for column in batch:
                column.clear()

        for record in iter_records(request.path, len(plan.header)):
            if record.error is not None or record.fields is None:
                structural[record.number] = f"malformed record ({record.error})"
                continue
            batch[0].append(record.number)
            for index, value in enumerate(record.fields, start=1):
                batch[index].append(value if value != "" else None)
            if len(batch[0]) >= _BATCH_ROWS:
                flush()
        flush()
        return Staged(rejects=structural)

    def typed(self, column: str, kind: Kind) -> str:
        # The stage already holds typed values (see _typed_columns).
        return column


def direct_insert_sql(target: str, plan: ColumnPlan, rules: str) -> str:
    """The one-pass ``INSERT`` into ``target``: parameters execution id, loaded-at time, file path.

    ``rules`` is the reason CASE (NULL for a row that passes); a row it names stops the statement.
    """
    names = ", ".join(quote(n) for n in plan.header)
    return (
        f"INSERT INTO {target} ({names}, {quote(EXECUTION_ID_COLUMN)}, {quote(LOADED_AT_COLUMN)}) "
        f"SELECT {_typed_columns(plan)}, "
        f"CASE WHEN ({rules}) IS NULL THEN CAST(? AS TEXT) ELSE error('{_RULE_BROKEN}') END, "
        f"CAST(? AS TIMESTAMP) FROM {_read_csv(plan, store_rejects=False)}"
    )


def _read_csv(plan: ColumnPlan, *, store_rejects: bool) -> str:
    """``read_csv`` of the file (the one parameter) with the header's columns as VARCHAR, nothing sniffed.

    With ``store_rejects`` a record DuckDB cannot split is set aside in ``_REJECTS_TABLE`` and the read
    goes on; without it, strict mode makes the statement fail on it.
    """
    columns = ", ".join(f"'{name}': 'VARCHAR'" for name in plan.header)
    rejects = (
        f", store_rejects = true, rejects_table = '{_REJECTS_TABLE}', rejects_scan = '{_REJECTS_SCAN}'"
        if store_rejects
        else ""
    )
    return (
        "read_csv(?, header = true, auto_detect = false, delim = ',', quote = '\"', escape = '\"', "
        f"columns = {{{columns}}}, allow_quoted_nulls = false, strict_mode = true{rejects})"
    )


def _typed_columns(plan: ColumnPlan) -> str:
    """The staged columns, typed while the file is read, under their own names.

    Typing in the same pass as reading and validating saves a second pass over the rows (the cast
    at insert time) and keeps the stage about half the size of its text, so less of it spills past
    the memory limit. ``TRY_CAST`` never fails the statement: a value it would cast loosely (a date
    in another spelling, ``1.005``) is in a row the ``_reason`` rules, computed from the text as
    read, reject, and rejected rows are never inserted.
    """
    out = []
    for name in plan.header:
        kind = plan.kinds[name]
        value = quote(name) if kind is Kind.TEXT else f"TRY_CAST({quote(name)} AS {kind.sql_type})"
        out.append(f"{value} AS {quote(name)}")
    return ", ".join(out)


def _database(conn: Any) -> tuple[str, str]:
    """The database file the connection writes (``:memory:<id>`` for an in-memory one, which belongs to
    its connection alone) and its current schema."""
    row = conn.execute(
        "SELECT path, current_schema() FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    path = os.path.realpath(str(row[0])) if row and row[0] else f":memory:{id(conn)}"
    return path, str(row[1]) if row else "main"


def _setting(value: str) -> str:
    """A memory size like ``1GB``: spliced into SET, so anything but digits, a dot and letters is refused."""
    if not value.replace(".", "").replace(" ", "").isalnum():
        raise ValueError(
            f"dialect_options: memory_limit {value!r} of the duckdb dialect is not a size like '1GB'"
        )
    return value
