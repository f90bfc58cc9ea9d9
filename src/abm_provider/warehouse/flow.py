"""The load flow every warehouse shares: check, stage, validate, then replace in one transaction.

1. Ask the ledger whether this execution and file are already in the table (then: a logged no-op).
2. Compare the file's header with the table (:func:`~.checks.plan_columns`).
3. Stage the file in a temporary table with the warehouse's bulk path (its
   :class:`~.dialects.base.Dialect`) and give every staged row a ``_reason`` when one of its values
   breaks the column rules of :mod:`abm_provider.warehouse.schema`.
4. Reject the rows with a reason, and all but the last row of any natural key the file repeats,
   write the rejects file, and stop past ``max_rejected`` (:mod:`.checks`).
5. Take the table's lock, re-check the ledger, create or widen the table, delete the rows whose
   natural key the file holds, insert the staged rows and write the ledger row, and commit once. A
   reader sees the old table or the new one, never a mix, and a load killed anywhere before the
   commit leaves the table and the ledger as they were.

Loads into one table end in commit order, not data order: a backfill or a second DAG run may commit
an older execution after a newer one. So, under the lock, a load whose execution is older (by
``LoadRequest.execution_time``, the ledger's ``execution_time``) than one whose rows are in the table
replaces only rows no newer execution wrote, and leaves out the file's rows whose key a newer
execution holds (``LoadResult.rows_stale``, :mod:`.newest`). Rows of a writer without a known time
count as older.

Into a table that does not exist yet, a warehouse that can (``Dialect.direct_new_table``) first tries
one bulk pass straight from the file into the new table, under the lock and inside the transaction
that creates it (``Dialect.load_direct``). It keeps that pass only when every record passed the
rules, no key repeated and nothing was rejected. Otherwise it rolls the whole attempt back, table
included, and runs steps 3 to 5. The result, the ledger row and what a reader can see are the same
either way; the staged flow is the one that sets bad rows aside with their line numbers.

A file still downloading is read as it arrives when the dialect takes readers (:mod:`.stream`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

from abm_provider.warehouse import checks, ledger, newest, sql
from abm_provider.warehouse.checks import ColumnPlan, plan_columns
from abm_provider.warehouse.dialects.base import Dialect, ProcessLock
from abm_provider.warehouse.load import LoadRequest, LoadResult
from abm_provider.warehouse.rules_sql import SqlValidated
from abm_provider.warehouse.schema import STAGE_TABLE, Kind, TableName
from abm_provider.warehouse.stream import IncomingFile

_MB = 1024 * 1024


class WarehouseLoader:
    """One load of one file into one table, through the warehouse's :class:`Dialect`."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.log = dialect.log

    @property
    def method(self) -> str:
        return self.dialect.capabilities.bulk_path

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
        incoming = IncomingFile(request, self.dialect.capabilities.stream_readers, self.log)
        held: list[ProcessLock] = []  # this load's locks of this process, released when it ends
        conn = self.dialect.connect()
        try:
            cur = self.dialect.cursor(conn)
            self.dialect.begin(cur)
            self._run(conn, cur, request, header, result, incoming, held)
            # Known once the download is; a skipped load reports the ledger's digest.
            result.sha256, result.bytes = result.sha256 or incoming.sha256, incoming.size
        except BaseException:
            self.dialect.rollback(conn)
            raise
        finally:
            incoming.let_go()
            try:
                self.dialect.close(conn)
            finally:
                _release(held)
        result.seconds = round(time.monotonic() - started, 3)
        return result

    def loaded_executions(self, table: TableName, ledger_table: TableName) -> set[str]:
        """The ids of the executions the ledger says are in ``table``; none before its first load."""
        d = self.dialect
        conn = d.connect()
        try:
            cur = d.cursor(conn)
            if d.table_columns(conn, cur, ledger_table) is None:
                return set()
            cur.execute(ledger.loaded_ids_sql(d, ledger_table), [str(table)])
            return {str(row[0]) for row in cur.fetchall()}
        finally:
            d.close(conn)

    def _run(
        self,
        conn: Any,
        cur: Any,
        request: LoadRequest,
        header: Sequence[str] | None,
        result: LoadResult,
        incoming: IncomingFile,
        held: list[ProcessLock],
    ) -> None:
        d = self.dialect
        if self._skip(conn, cur, request, incoming, result):
            return
        if header is None:
            header = incoming.header()
        existing = d.table_columns(conn, cur, request.table)
        plan = plan_columns(request, header, existing)
        if d.capabilities.direct_new_table and not plan.table_exists:
            if self._load_new_table(conn, cur, request, plan, result, incoming, held):
                return
            existing = d.table_columns(conn, cur, request.table)
            plan = plan_columns(request, header, existing)

        t0 = time.monotonic()
        # Rows are checked in SQL where the dialect can (``SqlValidated``), else while they are staged.
        reason_sql = d.reason_sql(plan, request.key_columns) if isinstance(d, SqlValidated) else ""
        staged = d.stage(cur, request, plan, reason_sql, incoming)
        incoming.wait_for_download()
        seconds = max(time.monotonic() - t0, 1e-6)
        self.log.info(
            "Staged %s (%.1f MB) in %.1f s (%.1f MB/s) via %s",
            request.path.name,
            incoming.size / _MB,
            seconds,
            incoming.size / _MB / seconds,
            self.method,
        )
        rejects = dict(staged.rejects)
        rejects.update(sql.value_rejects(cur, staged))
        rejects.update(sql.duplicate_rejects(d, cur, request.key_columns, staged))
        total = _count(cur, f"SELECT COUNT(*) FROM {STAGE_TABLE}") + len(staged.rejects)
        self._report_rejects(request, len(plan.header), rejects, total, result)

        self._lock(conn, cur, request.table, held)
        if self._skip(conn, cur, request, incoming, result):
            return
        current = d.table_columns(conn, cur, request.table)
        if current != existing:  # another load changed the table while this one staged
            plan = plan_columns(request, header, current)
        changed = self._prepare_ledger(conn, cur, request)
        changed = self._prepare_target(cur, request, plan) or changed
        result.columns_added = list(plan.to_add)
        if changed and not d.capabilities.transactional_ddl:
            # The DDL committed, and with it the lock: another load may have run in between.
            self._lock(conn, cur, request.table, held)
            if self._skip(conn, cur, request, incoming, result):
                return

        loaded_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        self._replace(cur, request, plan, loaded_at, result)
        known = staged.days  # None: staging did not learn them, so the stage is asked
        result.days = list(known if known is not None else self._days(cur, request, STAGE_TABLE, staged=True))
        self._write_ledger(conn, cur, request, incoming, result, loaded_at)
        conn.commit()

    def _load_new_table(
        self,
        conn: Any,
        cur: Any,
        request: LoadRequest,
        plan: ColumnPlan,
        result: LoadResult,
        incoming: IncomingFile,
        held: list[ProcessLock],
    ) -> bool:
        """The one-pass load into a new table; ``False`` when it was undone and the staged flow must run."""
        d = self.dialect
        self._lock(conn, cur, request.table, held)
        if self._skip(conn, cur, request, incoming, result):
            return True
        if d.table_columns(conn, cur, request.table) is not None:
            self.log.info("%s was created by another load meanwhile; staging the file", request.table)
            self._restart(conn, cur, held)
            return False
        self._prepare_ledger(conn, cur, request)
        self._prepare_target(cur, request, plan)
        loaded_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        started = time.monotonic()
        digest_known = bool(incoming.sha256)
        filled = d.load_direct(cur, request, plan, loaded_at, incoming)
        incoming.wait_for_download()
        # A link without an execution id: only now, downloaded, does the file say what it is.
        if not digest_known and self._skip(conn, cur, request, incoming, result):
            return True
        if filled is None:
            self._restart(conn, cur, held)
            return False
        rows = filled.rows
        seconds = max(time.monotonic() - started, 1e-6)
        self.log.info(
            "Loaded %s (%.1f MB) straight into the new table %s in %.1f s (%.1f MB/s): every record "
            "passed the column rules and no key repeats",
            request.path.name,
            incoming.size / _MB,
            request.table,
            seconds,
            incoming.size / _MB / seconds,
        )
        result.rows_loaded = rows
        known = filled.days  # None: the fill did not learn them, so the table is asked
        table = d.table_sql(request.table)
        result.days = list(known if known is not None else self._days(cur, request, table, staged=False))
        self._report_rejects(request, len(plan.header), {}, rows, result)
        self._write_ledger(conn, cur, request, incoming, result, loaded_at)
        conn.commit()
        return True

    def _days(self, cur: Any, request: LoadRequest, rows: str, *, staged: bool) -> list[str]:
        """The days the load's rows are about, from ``rows``: the stage (valid rows, as text) or a table
        only this load wrote."""
        column = request.export.day_column
        if column is None:
            return []
        d = self.dialect
        day = d.typed(d.quote(column), Kind.DATE) if staged else d.quote(column)
        valid = " WHERE _reason IS NULL" if staged else ""
        cur.execute(f"SELECT DISTINCT {day} FROM {rows}{valid}")
        return sorted(str(row[0])[:10] for row in cur.fetchall() if row[0] is not None)

    def _restart(self, conn: Any, cur: Any, held: list[ProcessLock]) -> None:
        """Undo everything of the transaction, locks included, and open a fresh one for the staged flow."""
        self.dialect.rollback(conn)
        _release(held)
        self.dialect.begin(cur)

    def _report_rejects(
        self, request: LoadRequest, width: int, rejects: dict[int, str], total: int, result: LoadResult
    ) -> None:
        result.rows_rejected = len(rejects)
        path = checks.report_rejects(request, width, rejects, total, self.log)
        if path is not None:
            result.rejects_path = path

    # ---- the ledger ----------------------------------------------------------------------------

    def _skip(
        self, conn: Any, cur: Any, request: LoadRequest, incoming: IncomingFile, result: LoadResult
    ) -> bool:
        """Whether the ledger has this load already (unless forced): then roll back, say so in ``result``."""
        if request.force:
            return False
        found = self._already_loaded(conn, cur, request, incoming.sha256)
        if found is None:
            return False
        self.dialect.rollback(conn)
        result.skipped, result.sha256 = True, incoming.sha256 or found
        return True

    def _already_loaded(self, conn: Any, cur: Any, request: LoadRequest, sha256: str) -> str | None:
        """The digest of the ledger's row for this execution and file (``sha256``, empty while it
        downloads) in the table; ``None`` when the ledger has none."""
        d = self.dialect
        if d.table_columns(conn, cur, request.ledger) is None:
            return None
        if sha256:
            cur.execute(
                ledger.find_sql(d, request.ledger),
                [str(request.table), sha256, request.execution_id, request.execution_id],
            )
        elif request.execution_id is not None:  # still downloading: an execution's file never changes
            cur.execute(
                ledger.find_execution_sql(d, request.ledger), [str(request.table), request.execution_id]
            )
        else:
            return None
        row = cur.fetchone()
        if row is None:
            return None
        self.log.info(
            "Execution %s (sha256 %s) is already in %s since %s (%s rows); nothing to do. "
            "Pass force=True to load it again.",
            request.execution_id,
            str(row[2])[:12],
            request.table,
            row[0],
            row[1],
        )
        return str(row[2])

    def _prepare_ledger(self, conn: Any, cur: Any, request: LoadRequest) -> bool:
        """Create the ledger, or add the columns an older version's ledger lacks (under the lock);
        whether it ran DDL."""
        d = self.dialect
        existing = d.table_columns(conn, cur, request.ledger)
        if existing is None:
            cur.execute(ledger.create_sql(d, request.ledger))
            return True
        missing = ledger.missing_columns(existing)
        for name, sql_type in missing:
            cur.execute(ledger.add_column_sql(d, request.ledger, name, sql_type))
            self.log.warning("Added column %s %s to the load ledger %s", name, sql_type, request.ledger)
        return bool(missing)

    def _write_ledger(
        self,
        conn: Any,
        cur: Any,
        request: LoadRequest,
        incoming: IncomingFile,
        result: LoadResult,
        loaded_at: dt.datetime,
    ) -> None:
        entry = ledger.LedgerEntry(
            target_table=str(request.table),
            execution_id=request.execution_id,
            export_type=request.export.export_type,
            sha256=incoming.sha256,
            source=request.source,
            bytes=incoming.size,
            rows_loaded=result.rows_loaded,
            rows_deleted=result.rows_deleted,
            rows_rejected=result.rows_rejected,
            loaded_at=loaded_at,
            method=self.method,
            execution_time=request.execution_time,
        )
        d = self.dialect
        cur.execute(ledger.insert_sql(d, request.ledger), [d.adapt(conn, v) for v in entry.values()])

    def newer_params(self, cur: Any, request: LoadRequest) -> list[Any]:
        """The bind values of the ledger's newer-execution queries, adapted for ``cur``'s driver."""
        return [
            self.dialect.adapt(cur, v)
            for v in ledger.newer_params(str(request.table), request.execution_time, request.execution_id)
        ]

    def _lock(self, conn: Any, cur: Any, table: TableName, held: list[ProcessLock]) -> None:
        """Take the dialect's lock on ``table`` and open the replace transaction; say so where it has none.

        A lock of this process goes into ``held``, released when the load's transaction has ended.
        """
        taken = self.dialect.lock(cur, table)
        if taken is not None:
            held.append(taken)
        self.dialect.begin_replace(conn, cur)
        if self.dialect.capabilities.table_lock == "none":
            self.log.warning(
                "The %s dialect has no lock that keeps two loads of %s apart: run one load of a table "
                "at a time (for example max_active_tis_per_dag=1 on the task)",
                self.dialect.name,
                table,
            )

    # ---- the replace step ----------------------------------------------------------------------

    def _prepare_target(self, cur: Any, request: LoadRequest, plan: ColumnPlan) -> bool:
        """Create the table or add the file's new columns; whether it ran DDL."""
        d = self.dialect
        if not plan.table_exists:
            cur.execute(sql.create_table_sql(d, request, plan))
            self.log.info("Created table %s", request.table)
        for name in plan.to_add:
            cur.execute(sql.add_column_sql(d, request, plan, name))
            self.log.warning("Added column %s %s to %s", name, d.column_type(plan.kinds[name]), request.table)
        return not plan.table_exists or bool(plan.to_add)

    def _replace(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, loaded_at: dt.datetime, result: LoadResult
    ) -> None:
        """Delete the restated keys, insert the staged rows, and index a table this load created.

        When a newer execution than this one is in the table (the usual case: none, found by one
        ledger query), rows it wrote are neither deleted nor replaced: see :mod:`.newest`.
        """
        d = self.dialect
        found = (
            newest.newer_execution(d, cur, request, self.newer_params(cur, request))
            if plan.table_exists
            else None
        )
        if found is not None:
            # An execution older than one in the table: the newer figures stay. Only the restated
            # rows no newer execution wrote go, and only the staged rows whose key is then free come
            # in (a key still in the table is a newer execution's).
            result.rows_deleted = self.delete_replaced(cur, request, plan, keep_newer=True)
            kept, days = newest.stale_rows(d, cur, request, plan)
            result.rows_loaded = self.insert_new(cur, request, plan, loaded_at, keep_newer=True)
            newest.report_older(self.log, request, result, found, kept, days)
        else:
            result.rows_deleted = self.delete_replaced(cur, request, plan)
            result.rows_loaded = self.insert_new(cur, request, plan, loaded_at)
        if not plan.table_exists and self.dialect.capabilities.unique_key_index:
            # Built once the rows are in: one sort, while keeping an index up to date row by row
            # during the insert costs more than the insert and the build together
            # (docs/performance.md, "Figures behind design choices"). The table is new in this
            # transaction, so nobody sees it without the index.
            self.dialect.create_key_index(cur, sql.key_index_sql(self.dialect, request))

    def delete_replaced(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, *, keep_newer: bool = False
    ) -> int:
        """Delete the table's rows whose natural key the file holds (restated rows).

        ``keep_newer``: except the rows an execution newer than this one wrote (by the ledger).
        """
        statement = sql.delete_sql(self.dialect, request, plan, keep_newer=keep_newer)
        if keep_newer:
            cur.execute(statement, self.newer_params(cur, request))
        else:
            cur.execute(statement)
        return self.dialect.rowcount(cur)

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
        cur.execute(
            sql.insert_sql(self.dialect, request, plan, keep_newer=keep_newer),
            [request.execution_id, self.dialect.adapt(cur, loaded_at)],
        )
        return self.dialect.rowcount(cur)


def _release(held: list[ProcessLock]) -> None:
    """Release the locks of this process a load took (its transaction has ended), emptying ``held``."""
    while held:
        held.pop().release()


def _count(cur: Any, statement: str) -> int:
    cur.execute(statement)
    row = cur.fetchone()
    return int(row[0]) if row else 0
