"""The load flow every warehouse shares: check, stage, validate, then replace in one transaction.

1. Ask the ledger whether this execution and file are already in the table (then: a logged no-op).
2. Compare the file's header with the table (or the export type's schema when there is no table
   yet): a missing or unknown column fails naming it before a byte is loaded, unless
   ``on_schema_change="add_columns"`` adds the unknown ones.
3. Stage the file in a temporary table with the warehouse's bulk path (a subclass's job) and give
   every staged row a ``_reason`` when one of its values breaks the column rules of
   :mod:`abm_provider.warehouse.schema`.
4. Reject the rows with a reason, and all but the last row of any natural key the file repeats;
   resolve their record numbers to file lines with one Python pass (only when there are rejects),
   write the rejects file, and stop past ``max_rejected``.
5. Take the table's lock, re-check the ledger, create or widen the table, delete the rows whose
   natural key the file holds, insert the staged rows and write the ledger row, and commit once. A
   reader sees the old table or the new one, never a mix, and a load killed anywhere before the
   commit leaves the table and the ledger as they were.

Loads into one table end in commit order, not data order: a backfill or a second DAG run may commit
an older execution after a newer one. So, under the lock, a load whose execution is older (by
``LoadRequest.execution_time``, the ledger's ``execution_time``) than one whose rows are in the table
replaces only rows no newer execution wrote, and leaves out the file's rows whose key a newer
execution holds (``LoadResult.rows_stale``). Rows of a writer without a known time count as older.

Into a table that does not exist yet, a warehouse that can (``direct_new_table``) first tries one
bulk pass straight from the file into the new table, under the lock and inside the transaction that
creates it (:meth:`WarehouseLoader.load_direct`). It keeps that pass only when it proves every record
sound, no key repeated and nothing rejected. Otherwise it rolls the whole attempt back, table
included, and runs steps 3 to 5. The result, the ledger row and what a reader can see are the
same either way; the staged flow is the one that sets bad rows aside with their line numbers.

A file still downloading (``LoadRequest.stream``) is read by the bulk pass of step 3, or of the
one-pass load, as it arrives, when the warehouse's loader takes readers (``stream_readers``); right
after that pass the load waits for the download to be complete and checked (``settle``), and only
then reads the file itself (rejects, fallbacks), checks the ledger by digest and commits.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from abm_provider.common.rejects import Limit, RejectsWriter, check_rejects, describe_reject
from abm_provider.warehouse import ledger
from abm_provider.warehouse.records import locate, parse_header, read_header
from abm_provider.warehouse.rules_sql import SqlValidated
from abm_provider.warehouse.schema import (
    EXECUTION_ID_COLUMN,
    LINEAGE_COLUMNS,
    LOADED_AT_COLUMN,
    ExportSchema,
    Kind,
    TableName,
    check_identifier,
    quote,
)

STAGE_TABLE = "_abm_stage"
OnSchemaChange = Literal["fail", "add_columns"]
_MB = 1024 * 1024


class SchemaMismatch(ValueError):
    """The file's columns do not match the table's; the message names the columns at fault."""


class StreamReader(Protocol):
    """One reader of a file that is still arriving (:class:`abm_provider.exports.pipe.BytePipe`)."""

    def read(self, size: int | None = -1) -> bytes: ...

    def read_header(self, limit: int = ...) -> bytes: ...

    def chunks(self) -> Iterator[bytes]: ...

    def detach(self) -> None: ...


class Verified(Protocol):
    """A streamed file once complete and checked."""

    @property
    def sha256(self) -> str: ...

    @property
    def size(self) -> int: ...


class ByteSource(Protocol):
    """A file that is still downloading (:class:`abm_provider.exports.stream.ExportStream`)."""

    def open(self, readers: int) -> Sequence[StreamReader]: ...

    def settle(self) -> Verified: ...


@dataclass
class LoadRequest:
    """Everything one load needs, already resolved from the operator's (templated) arguments.

    With a ``stream`` the file at ``path`` is still downloading: a loader whose bulk path can read it
    as it arrives does (``stream_readers``), then :meth:`WarehouseLoader.settle` waits for the file
    to be complete and checked, fills in ``sha256`` and ``size`` (empty until then) and drops the
    stream, before anything else reads ``path`` and before the commit.
    """

    path: Path
    source: str
    table: TableName
    export: ExportSchema
    key_columns: tuple[str, ...]
    execution_id: str | None
    sha256: str
    size: int
    rejects_path: Path
    ledger: TableName
    force: bool = False
    on_schema_change: OnSchemaChange = "fail"
    max_rejected: Limit = 0
    stream: ByteSource | None = None
    #: When the execution completed (its ``updateTime``, UTC, naive), which orders loads into one
    #: table: rows an execution wrote are never replaced by an older execution's. ``None``: unknown
    #: (a bare file), and the load replaces what it restates, as every load did before.
    execution_time: dt.datetime | None = None


@dataclass
class LoadResult:
    """The XCom summary of one load: small, JSON-serialisable, no row data."""

    table: str
    export_type: str
    execution_id: str | None
    sha256: str
    bytes: int
    method: str
    rows_loaded: int = 0
    rows_deleted: int = 0
    rows_rejected: int = 0
    rejects_path: str | None = None
    seconds: float = 0.0
    skipped: bool = False
    columns_added: list[str] = field(default_factory=list)
    #: Rows of the file not loaded because a newer execution's row already holds their key: this
    #: execution arrived after a newer one (a backfill, a concurrent run), and the newer figures stay.
    rows_stale: int = 0
    #: The newer executions that hold those keys (at most five), when ``rows_stale`` is not 0.
    newer_executions: list[str] = field(default_factory=list)

    @property
    def rows_replaced(self) -> int:
        return self.rows_deleted

    def to_xcom(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows_replaced"] = self.rows_deleted
        return data


@dataclass(frozen=True)
class ColumnPlan:
    """The file's columns with their kinds, and the ones to add to an existing table."""

    header: tuple[str, ...]
    kinds: dict[str, Kind]
    to_add: tuple[str, ...]
    table_exists: bool


def plan_columns(request: LoadRequest, header: Sequence[str], existing: Sequence[str] | None) -> ColumnPlan:
    """Match the header against the table, or the export schema when the table does not exist yet."""
    for name in header:
        check_identifier(name, f"column in the header of {request.path.name}:")
    duplicated = sorted({name for name in header if list(header).count(name) > 1})
    if duplicated:
        raise SchemaMismatch(
            f"{request.path.name}: column(s) {duplicated} appear more than once in the header"
        )
    lineage = set(LINEAGE_COLUMNS)
    clash = sorted(lineage.intersection(header))
    if clash:
        raise SchemaMismatch(f"{request.path.name}: column(s) {clash} are reserved for lineage")
    expected = [c for c in existing if c not in lineage] if existing is not None else []
    if existing is None:
        expected = list(request.export.column_names)
    missing = [c for c in expected if c not in header]
    missing += [k for k in request.key_columns if k not in header and k not in missing]
    where = f"table {request.table}" if existing is not None else f"export type {request.export.export_type}"
    if missing:
        raise SchemaMismatch(
            f"{request.path.name}: column(s) {missing} of {where} are missing from the file "
            f"(file columns: {list(header)})"
        )
    unknown = tuple(c for c in header if c not in expected)
    if unknown and request.on_schema_change != "add_columns":
        raise SchemaMismatch(
            f"{request.path.name}: column(s) {list(unknown)} are not in {where}; "
            "pass on_schema_change='add_columns' to add them"
        )
    kinds = request.export.kinds()
    plan_kinds = {name: kinds.get(name, Kind.TEXT) for name in header}
    to_add = unknown if existing is not None else ()
    return ColumnPlan(tuple(header), plan_kinds, to_add, existing is not None)


class WarehouseLoader(ABC):
    """One load of one file into one table; subclasses supply the dialect and the bulk staging path."""

    #: Short name reported in logs, XCom and the ledger.
    method: ClassVar[str]
    #: DB-API parameter marker of the driver.
    placeholder: ClassVar[str] = "%s"
    #: Whether a unique index on the natural key is created with the table.
    unique_key_index: ClassVar[bool] = True
    #: Whether a table that does not exist yet is first tried in one pass (``load_direct``).
    direct_new_table: ClassVar[bool] = False
    #: Readers of a streamed file the bulk path takes; 0: it reads the file once downloaded.
    stream_readers: ClassVar[int] = 0

    def __init__(self, hook: Any, log: logging.Logger | None = None) -> None:
        self.hook = hook
        self.log = log or logging.getLogger(__name__)
        #: The stream's readers while the file is still arriving (see ``header`` and ``settle``).
        self.readers: list[StreamReader] = []
        #: Set by a ``stage`` that proved no natural key repeats (PostgreSQL's pre-scan: keys in
        #: strictly increasing order), which spares the scan for repeated keys.
        self.keys_proven_unique = False

    # ---- dialect hooks -------------------------------------------------------------------------

    def connect(self) -> Any:
        return self.hook.get_conn()

    def cursor(self, conn: Any) -> Any:
        return conn.cursor()

    def begin(self, cur: Any) -> None:  # noqa: B027 - optional hook, most drivers need nothing
        """Start the transaction (drivers that open one implicitly need nothing)."""

    def begin_replace(self, cur: Any) -> None:  # noqa: B027 - optional hook, most drivers need nothing
        """Called after staging, before the lock: drivers that stage outside the transaction open it here."""

    @abstractmethod
    def table_columns(self, conn: Any, cur: Any, table: TableName) -> list[str] | None:
        """The table's column names in order, or ``None`` when it does not exist."""

    @abstractmethod
    def stage(self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str) -> dict[int, str]:
        """Create and fill ``STAGE_TABLE`` with a ``_reason`` column; return structural rejects."""

    def load_direct(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, loaded_at: dt.datetime
    ) -> int | None:
        """Fill the new, empty target straight from the file; the rows loaded, or ``None`` to fall back.

        Why: staging writes every row twice (stage, then table), which for a first load or a
        backfill is most of the time. Called under the lock, in the transaction that has just
        created the table; ``None`` (the file has a record to reject, a key it repeats, or cannot
        be read in one pass) makes the caller roll all of it back and run the staged flow.
        """
        return None

    @abstractmethod
    def record_numbers(self, ids: Sequence[int]) -> list[int]:
        """Map the stage's row ids (``order_column``) to record numbers of the file."""

    #: Column (or pseudo-column) of the stage that increases with the record number.
    order_column: str = "_rec"

    def typed(self, column: str, kind: Kind) -> str:
        """SQL turning a staged (text) column into the table's type."""
        return f"CAST({column} AS {kind.sql_type})"

    def param(self, sql_type: str) -> str:
        return f"CAST({self.placeholder} AS {sql_type})"

    def lock(self, cur: Any, table: TableName) -> None:  # noqa: B027 - generic has no portable lock
        """Serialise loads into ``table`` until the transaction ends (best effort where unsupported)."""

    def rowcount(self, cur: Any) -> int:
        return int(cur.rowcount)

    def adapt(self, conn: Any, value: Any) -> Any:
        """Turn a Python value into one the driver binds (the generic path overrides for sqlite)."""
        return value

    # ---- the flow ------------------------------------------------------------------------------

    def load(self, request: LoadRequest, header: Sequence[str] | None = None) -> LoadResult:
        """Load the request's file; ``header`` is read from it (or from its stream) when not given."""
        started = time.monotonic()
        result = LoadResult(
            table=str(request.table),
            export_type=request.export.export_type,
            execution_id=request.execution_id,
            sha256=request.sha256,
            bytes=request.size,
            method=self.method,
        )
        conn = self.connect()
        try:
            cur = self.cursor(conn)
            self.begin(cur)
            self._run(conn, cur, request, header, result)
            result.sha256, result.bytes = request.sha256, request.size  # known once a stream settled
        except BaseException:
            self._rollback(conn)
            raise
        finally:
            self._let_go_readers()
            self._close(conn)
        result.seconds = round(time.monotonic() - started, 3)
        return result

    def _run(
        self, conn: Any, cur: Any, request: LoadRequest, header: Sequence[str] | None, result: LoadResult
    ) -> None:
        if not request.force and self._already_loaded(conn, cur, request):
            self._rollback(conn)
            result.skipped = True
            return
        if header is None:
            header = self.header(request)
        existing = self.table_columns(conn, cur, request.table)
        plan = plan_columns(request, header, existing)
        if self.direct_new_table and not plan.table_exists:
            if self._run_direct(conn, cur, request, plan, result):
                return
            existing = self.table_columns(conn, cur, request.table)
            plan = plan_columns(request, header, existing)

        t0 = time.monotonic()
        # Rows are checked in SQL where the loader can (``SqlValidated``), else while they are staged.
        reason_sql = self.reason_sql(plan, request.key_columns) if isinstance(self, SqlValidated) else ""
        structural = self.stage(cur, request, plan, reason_sql)
        self.settle(request)
        seconds = max(time.monotonic() - t0, 1e-6)
        self.log.info(
            "Staged %s (%.1f MB) in %.1f s (%.1f MB/s) via %s",
            request.path.name,
            request.size / _MB,
            seconds,
            request.size / _MB / seconds,
            self.method,
        )
        rejects = dict(structural)
        rejects.update(self._value_rejects(cur))
        if not self.keys_proven_unique:
            rejects.update(self._duplicate_rejects(cur, request.key_columns))
        total = self._count(cur, f"SELECT COUNT(*) FROM {STAGE_TABLE}") + len(structural)
        self._report_rejects(request, len(plan.header), rejects, total, result)

        self.begin_replace(cur)
        self.lock(cur, request.table)
        if not request.force and self._already_loaded(conn, cur, request):
            self._rollback(conn)
            result.skipped = True
            return
        current = self.table_columns(conn, cur, request.table)
        if current != existing:  # another load changed the table while this one staged
            plan = plan_columns(request, header, current)
        self._prepare_ledger(conn, cur, request)
        self._prepare_target(cur, request, plan)
        result.columns_added = list(plan.to_add)

        loaded_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        self._replace(cur, request, plan, loaded_at, result)
        self._write_ledger(conn, cur, request, result, loaded_at)
        conn.commit()

    def _run_direct(
        self, conn: Any, cur: Any, request: LoadRequest, plan: ColumnPlan, result: LoadResult
    ) -> bool:
        """The one-pass load into a new table; ``False`` when it was undone and the staged flow must run."""
        self.begin_replace(cur)
        self.lock(cur, request.table)
        if not request.force and self._already_loaded(conn, cur, request):
            self._rollback(conn)
            result.skipped = True
            return True
        if self.table_columns(conn, cur, request.table) is not None:
            self.log.info("%s was created by another load meanwhile; staging the file", request.table)
            self._restart(conn, cur)
            return False
        self._prepare_ledger(conn, cur, request)
        self._prepare_target(cur, request, plan)
        loaded_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        started = time.monotonic()
        digest_known = bool(request.sha256)
        rows = self.load_direct(cur, request, plan, loaded_at)
        self.settle(request)
        if not (digest_known or request.force) and self._already_loaded(conn, cur, request):
            # A link without an execution id: only now, downloaded, does the file say what it is.
            self._rollback(conn)
            result.skipped = True
            return True
        if rows is None:
            self._restart(conn, cur)
            return False
        seconds = max(time.monotonic() - started, 1e-6)
        self.log.info(
            "Loaded %s (%.1f MB) straight into the new table %s in %.1f s (%.1f MB/s): every record "
            "passed the column rules and no key repeats",
            request.path.name,
            request.size / _MB,
            request.table,
            seconds,
            request.size / _MB / seconds,
        )
        result.rows_loaded = rows
        self._report_rejects(request, len(plan.header), {}, rows, result)
        self._write_ledger(conn, cur, request, result, loaded_at)
        conn.commit()
        return True

    def header(self, request: LoadRequest) -> list[str]:
        """The file's column names: from its first line as it arrives, or from the file."""
        if request.stream is not None and self.stream_readers > 0:
            if not self.readers:
                self.readers = list(request.stream.open(self.stream_readers))
            first = self.readers[0].read_header()
            return parse_header([first.decode("utf-8", "surrogateescape")], request.path.name)
        self.settle(request)
        return read_header(request.path)

    def settle(self, request: LoadRequest) -> None:
        """Wait until a streamed file is complete, checked and published; then it is read as a file.

        Called when the bulk path has read the stream (or gave up on it), before anything else reads
        ``request.path`` and before the commit: a download that broke or failed a check raises
        :class:`~abm_provider.exports.pipe.StreamBroken` here and the load rolls back.
        """
        stream, request.stream = request.stream, None
        if stream is None:
            return
        self._let_go_readers()
        started = time.monotonic()
        verified = stream.settle()
        request.sha256, request.size = verified.sha256, verified.size
        self.log.info(
            "The download of %s is complete and checked (%.1f MB, sha256 %s; waited %.1f s for it)",
            request.path.name,
            request.size / _MB,
            request.sha256[:12],
            time.monotonic() - started,
        )

    def _let_go_readers(self) -> None:
        """Detach the stream's readers: the download never waits on them, and a thread blocked on
        one wakes up (the load is over with them, on every path)."""
        readers, self.readers = self.readers, []
        for reader in readers:
            reader.detach()

    def _restart(self, conn: Any, cur: Any) -> None:
        """Undo everything of the transaction and open a fresh one for the staged flow."""
        self._rollback(conn)
        self.begin(cur)

    def _write_ledger(
        self, conn: Any, cur: Any, request: LoadRequest, result: LoadResult, loaded_at: dt.datetime
    ) -> None:
        entry = ledger.LedgerEntry(
            target_table=str(request.table),
            execution_id=request.execution_id,
            export_type=request.export.export_type,
            sha256=request.sha256,
            source=request.source,
            bytes=request.size,
            rows_loaded=result.rows_loaded,
            rows_deleted=result.rows_deleted,
            rows_rejected=result.rows_rejected,
            loaded_at=loaded_at,
            method=self.method,
            execution_time=request.execution_time,
        )
        cur.execute(
            ledger.insert_sql(request.ledger, self.placeholder), [self.adapt(conn, v) for v in entry.values()]
        )

    # ---- steps ---------------------------------------------------------------------------------

    def _replace(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, loaded_at: dt.datetime, result: LoadResult
    ) -> None:
        """Delete the restated keys, insert the staged rows, and index a table this load created.

        When a newer execution than this one is in the table (the usual case: none, found by one
        ledger query), rows it wrote are neither deleted nor replaced: see :mod:`.newest`.
        """
        from abm_provider.warehouse import newest  # it builds on this module's types

        found = newest.newer_execution(self, cur, request) if plan.table_exists else None
        if found is not None:
            newest.replace_older(self, cur, request, plan, loaded_at, result, found)
        else:
            result.rows_deleted = self.delete_replaced(cur, request, plan)
            result.rows_loaded = self.insert_new(cur, request, plan, loaded_at)
        if not plan.table_exists and self.unique_key_index:
            self._create_key_index(cur, request)

    def newer_params(self, request: LoadRequest) -> list[Any]:
        """The bind values of the ledger's newer-execution queries, adapted for the driver."""
        return [
            self.adapt(None, v)
            for v in ledger.newer_params(str(request.table), request.execution_time, request.execution_id)
        ]

    def match_sql(self, request: LoadRequest, plan: ColumnPlan, target: str, stage: str) -> str:
        """Equality of the natural key between a ``target`` row and a ``stage`` row (aliases)."""
        return " AND ".join(
            f"{target}.{quote(k)} = {self.typed(stage + '.' + quote(k), plan.kinds[k])}"
            for k in request.key_columns
        )

    def _already_loaded(self, conn: Any, cur: Any, request: LoadRequest) -> bool:
        if self.table_columns(conn, cur, request.ledger) is None:
            return False
        if request.sha256:
            cur.execute(
                ledger.find_sql(request.ledger, self.placeholder),
                [str(request.table), request.sha256, request.execution_id, request.execution_id],
            )
        elif request.execution_id is not None:  # still downloading: an execution's file never changes
            cur.execute(
                ledger.find_execution_sql(request.ledger, self.placeholder),
                [str(request.table), request.execution_id],
            )
        else:
            return False
        row = cur.fetchone()
        if row is None:
            return False
        request.sha256 = request.sha256 or str(row[2])
        self.log.info(
            "Execution %s (sha256 %s) is already in %s since %s (%s rows); nothing to do. "
            "Pass force=True to load it again.",
            request.execution_id,
            str(row[2])[:12],
            request.table,
            row[0],
            row[1],
        )
        return True

    def _value_rejects(self, cur: Any) -> dict[int, str]:
        cur.execute(f"SELECT {self.order_column}, _reason FROM {STAGE_TABLE} WHERE _reason IS NOT NULL")
        rows = cur.fetchall()
        numbers = self.record_numbers([int(r[0]) for r in rows])
        return {n: str(r[1]) for n, r in zip(numbers, rows, strict=True)}

    def _duplicate_rejects(self, cur: Any, keys: Sequence[str]) -> dict[int, str]:
        """All but the last row of each natural key the file repeats (the later row wins)."""
        key_sql = ", ".join(quote(k) for k in keys)
        cur.execute(
            f"SELECT 1 FROM {STAGE_TABLE} WHERE _reason IS NULL "
            f"GROUP BY {key_sql} HAVING COUNT(*) > 1 LIMIT 1"
        )
        if cur.fetchone() is None:
            return {}
        order = self.order_column
        cur.execute(
            f"SELECT _o FROM (SELECT {order} AS _o, ROW_NUMBER() OVER (PARTITION BY {key_sql} "
            f"ORDER BY {order} DESC) AS _n FROM {STAGE_TABLE} WHERE _reason IS NULL) d WHERE _n > 1"
        )
        ids = [int(r[0]) for r in cur.fetchall()]
        reason = f"duplicate natural key ({', '.join(keys)}): a later row of the file has the same key"
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            marks = ", ".join(self.placeholder for _ in chunk)
            cur.execute(
                f"UPDATE {STAGE_TABLE} SET _reason = {self.placeholder} WHERE {order} IN ({marks})",
                [reason, *chunk],
            )
        return dict.fromkeys(self.record_numbers(ids), reason)

    def _report_rejects(
        self, request: LoadRequest, width: int, rejects: dict[int, str], total: int, result: LoadResult
    ) -> None:
        result.rows_rejected = len(rejects)
        path = request.rejects_path
        found = locate(request.path, width, set(rejects)) if rejects else {}
        examples: list[str] = []
        # remove_stale: a clean load removes the file an earlier load left there, which would mislead.
        with RejectsWriter(path, remove_stale=True) as writer:
            for number in sorted(rejects):
                record = found.get(number)
                line = record.line if record is not None else None
                writer.write(
                    rejects[number],
                    record=number,
                    line=line,
                    raw=record.raw.rstrip("\r\n") if record is not None else "",
                )
                if len(examples) < 2:
                    examples.append(describe_reject(rejects[number], number, line))
        if not writer.written:
            return
        result.rejects_path = str(path)
        self.log.warning("%d of %d records rejected; written to %s", writer.count, total, path)
        check_rejects(
            len(rejects),
            request.max_rejected,
            total=total,
            examples=examples,
            rejects_path=path,
            outcome="Nothing was loaded.",
        )

    #: Whether ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` is understood (not by SQLite).
    add_column_if_not_exists: ClassVar[bool] = True

    def _prepare_ledger(self, conn: Any, cur: Any, request: LoadRequest) -> None:
        """Create the ledger, or add the columns an older version's ledger lacks (under the lock)."""
        existing = self.table_columns(conn, cur, request.ledger)
        if existing is None:
            cur.execute(ledger.create_sql(request.ledger))
            return
        for name, sql_type in ledger.missing_columns(existing):
            cur.execute(
                ledger.add_column_sql(
                    request.ledger, name, sql_type, if_not_exists=self.add_column_if_not_exists
                )
            )
            self.log.warning("Added column %s %s to the load ledger %s", name, sql_type, request.ledger)

    def _prepare_target(self, cur: Any, request: LoadRequest, plan: ColumnPlan) -> None:
        if not plan.table_exists:
            columns = [f"{quote(n)} {plan.kinds[n].sql_type}" for n in plan.header]
            columns += [f"{quote(EXECUTION_ID_COLUMN)} TEXT", f"{quote(LOADED_AT_COLUMN)} TIMESTAMP"]
            cur.execute(f"CREATE TABLE IF NOT EXISTS {request.table.sql} ({', '.join(columns)})")
            self.log.info("Created table %s", request.table)
        for name in plan.to_add:
            cur.execute(
                f"ALTER TABLE {request.table.sql} ADD COLUMN {quote(name)} {plan.kinds[name].sql_type}"
            )
            self.log.warning("Added column %s %s to %s", name, plan.kinds[name].sql_type, request.table)

    def _create_key_index(self, cur: Any, request: LoadRequest) -> None:
        """The unique natural-key index of a table this load created, built once its rows are in.

        Why after the insert: building an index over rows already there is one sort, while keeping
        it up to date row by row during the insert costs more than the insert and the build together
        (docs/performance.md, "Figures behind design choices"). The table is new in this transaction,
        so nobody sees it without the index.
        """
        index = quote(f"{request.table.name}_natural_key")
        keys = ", ".join(quote(k) for k in request.key_columns)
        cur.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {index} ON {request.table.sql} ({keys})")

    def delete_replaced(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, *, keep_newer: bool = False
    ) -> int:
        """Delete the table's rows whose natural key the file holds (restated rows).

        ``keep_newer``: except the rows an execution newer than this one wrote (by the ledger).
        """
        target = quote(request.table.name)
        match = self.match_sql(request, plan, target, "s")
        sql = (
            f"DELETE FROM {request.table.sql} WHERE EXISTS "
            f"(SELECT 1 FROM {STAGE_TABLE} s WHERE s._reason IS NULL AND {match})"
        )
        if not keep_newer:
            cur.execute(sql)
            return self.rowcount(cur)
        writer = f"{target}.{quote(EXECUTION_ID_COLUMN)}"
        cur.execute(
            f"{sql} AND ({writer} IS NULL OR {writer} NOT IN "
            f"({ledger.newer_ids_sql(request.ledger, self.placeholder)}))",
            self.newer_params(request),
        )
        return self.rowcount(cur)

    def insert_new(
        self,
        cur: Any,
        request: LoadRequest,
        plan: ColumnPlan,
        loaded_at: dt.datetime,
        *,
        keep_newer: bool = False,
    ) -> int:
        """Insert the staged rows, typed, with the lineage columns.

        ``keep_newer``: only those whose key is not in the table (after ``delete_replaced`` with
        ``keep_newer``, a key still there is a newer execution's).
        """
        names = ", ".join(quote(n) for n in plan.header)
        values = ", ".join(self.typed(quote(n), plan.kinds[n]) for n in plan.header)
        free = ""
        if keep_newer:
            free = (
                f" AND NOT EXISTS (SELECT 1 FROM {request.table.sql} h "
                f"WHERE {self.match_sql(request, plan, 'h', STAGE_TABLE)})"
            )
        cur.execute(
            f"INSERT INTO {request.table.sql} "
            f"({names}, {quote(EXECUTION_ID_COLUMN)}, {quote(LOADED_AT_COLUMN)}) "
            f"SELECT {values}, {self.param('TEXT')}, {self.param('TIMESTAMP')} "
            f"FROM {STAGE_TABLE} WHERE _reason IS NULL{free}",
            [request.execution_id, self.adapt(None, loaded_at)],
        )
        return self.rowcount(cur)

    # ---- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _count(cur: Any, sql: str) -> int:
        cur.execute(sql)
        row = cur.fetchone()
        return int(row[0]) if row else 0

    def _rollback(self, conn: Any) -> None:
        try:
            conn.rollback()
        except Exception:  # the connection may already be gone (killed server, closed socket)
            self.log.debug("rollback failed", exc_info=True)

    def _close(self, conn: Any) -> None:
        try:
            conn.close()
        except Exception:
            self.log.debug("close failed", exc_info=True)
