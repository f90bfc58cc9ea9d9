"""One connection to the state warehouse: bind-parameter SQL, transactions, bulk staging and the lock.

The sync writes through one DB-API connection so its temporary source table and its transactions are
its own. What differs between databases (quoting, the bind marker, how a transaction opens, how rows
are staged in bulk, statistics, and the lock a session keeps) is the warehouse's
:class:`~abm_provider.warehouse.dialects.base.Dialect`'s, so this module has no branch per database.
A sync takes its lock where the database has one a session keeps across transactions (PostgreSQL's
advisory lock, MySQL's ``GET_LOCK``); it dies with the connection, so a killed task cannot leave it
behind. Where the database does not name the holder's run, or has no such lock (DuckDB, whose file is
the lock between processes, and any other database), a lock table of this process stands in
(:data:`_IN_PROCESS_LOCKS`) and names the run. Where several processes write a database without
session locks (Snowflake, BigQuery), the lock is a row of ``<prefix>locks`` besides
(:mod:`~abm_provider.accounts.sync.statements.locks`): it cannot die with the connection, so its holder
refreshes it as it commits, and a row left unrefreshed for :data:`LOCK_ROW_STALE_AFTER` is taken over.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from airflow.providers.common.sql.hooks.sql import DbApiHook

from abm_provider.accounts.sync.state import StateTables, TableSql, utc_now
from abm_provider.accounts.sync.statements import locks
from abm_provider.accounts.sync.statements.binding import Sql, param_style
from abm_provider.accounts.sync.statements.staging import RECORD
from abm_provider.accounts.sync.statements.tables import StateSql
from abm_provider.warehouse.dialects import Dialect, dialect_for
from abm_provider.warehouse.dialects.base import lock_number

__all__ = ["LOCK_POLL_INTERVAL", "LockHolder", "StateDatabase", "StateFileLocked", "lock_number", "wait_for"]

log = logging.getLogger(__name__)

#: Seconds between two tries of a busy lock: a sync runs for seconds to minutes, so once a second is
#: prompt enough and costs the database nothing.
LOCK_POLL_INTERVAL = 1.0
#: How a session holding a sync lock is labelled where the database keeps a label; the run id follows.
_LABEL_PREFIX = "abm_sync "
#: A lock row not refreshed for this long is a run that died (a killed worker cannot delete it): the next
#: run takes it over. Its holder refreshes it at each commit, at most every :data:`LOCK_ROW_BEAT`.
LOCK_ROW_STALE_AFTER = timedelta(minutes=30)
LOCK_ROW_BEAT = timedelta(minutes=1)
#: Tries of the transaction that takes a lock row, when the database aborts it for a concurrent one
#: (BigQuery aborts one of two transactions writing a table, whichever lists they are for).
LOCK_ROW_TRIES = 3
#: A DuckDB state database holds at most this much in memory and spills the rest to disk, so a sync's
#: peak memory stays flat whatever the list's size; a ``memory_limit`` the connection sets wins.
_STATE_OPTIONS = {"memory_limit": "64MB"}


@dataclass(frozen=True)
class LockHolder:
    """Who holds a sync lock, as far as the database can tell (``None`` where it cannot)."""

    run_id: str | None
    since: datetime | None
    pid: int | None

    def describe(self) -> str:
        """``run id X, started T, PID P``, leaving out what is unknown."""
        parts = [f"run id {self.run_id}" if self.run_id else "run id unknown"]
        if self.since is not None:
            parts.append(f"started {self.since.isoformat(sep=' ', timespec='seconds')}")
        if self.pid is not None:
            parts.append(f"PID {self.pid}")
        return ", ".join(parts)


class StateFileLocked(Exception):
    """The DuckDB state file is open in another process; DuckDB lets one process write a file."""

    def __init__(self, path: str, pid: int | None, detail: str) -> None:
        super().__init__(detail)
        self.path = path
        self.pid = pid


#: Sync locks taken in this process, by (database, key): the lock between connections of one process
#: on DuckDB and other databases, where the database has no lock a sync can keep across transactions.
_IN_PROCESS_LOCKS: dict[tuple[str, str], LockHolder] = {}
_IN_PROCESS_LOCKS_GUARD = threading.Lock()
#: One creator of state tables at a time in this process (PostgreSQL serialises across processes).
_CREATING = threading.Lock()


def _pause(seconds: float) -> None:
    """Sleep between two tries of a busy lock (a function of its own so tests can step it)."""
    time.sleep(seconds)


def wait_for(attempt: Callable[[], bool], timeout: float) -> bool:
    """Call ``attempt`` until it returns ``True`` or ``timeout`` seconds have passed.

    One rule for every lock the sync waits for (a PostgreSQL advisory lock, the in-process lock, a
    DuckDB file): polling keeps the wait bounded by the caller's timeout on every database, where a
    blocking wait would need each database's own timeout setting. ``timeout`` 0 tries once.
    """
    deadline = time.monotonic() + timeout
    while True:
        if attempt():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        _pause(min(LOCK_POLL_INTERVAL, left))


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class StateDatabase:
    """The state warehouse, through one connection.

    The sync's own statements (:mod:`~abm_provider.accounts.sync.statements`) carry their values and
    are bound in the parameter style the dialect declares; a text is run as written, with values in
    the driver's own style (:attr:`marker`, :meth:`marks`). A user's query goes to the driver untouched,
    with the user's parameters as given (:meth:`run_query`). No SQL text is rewritten here, so a ``%``
    or ``?`` in a user's literal, comment or operator reaches the database as written.
    """

    def __init__(self, hook: DbApiHook, *, lock_timeout: float = 0.0) -> None:
        """Connect; wait up to ``lock_timeout`` seconds for a database file another process holds.

        :raises StateFileLocked: the database file (DuckDB's) stayed locked by another process.
        :raises ValueError: the dialect declares no multi-statement transactions, which the sync needs.
        """
        self.hook = hook
        self.dialect: Dialect = dialect_for(hook, defaults=_STATE_OPTIONS, log=log)
        if not self.dialect.capabilities.multi_statement_transactions:
            # A plan commits with its run's row, and an answered group with the run's progress: one
            # without the other after a crash would send a change twice or record it as never sent.
            raise ValueError(
                f"the list sync's state database must commit several statements together, and the "
                f"{self.dialect.name} dialect declares multi_statement_transactions=False: keep the state "
                "tables on another connection (state_conn_id)"
            )
        self.style = param_style(self.dialect)
        self.marker = self.dialect.placeholder
        self.conn: Any = self._connect(lock_timeout)
        self.cur: Any = self.dialect.cursor(self.conn)
        self._own_locks: dict[str, LockHolder] = {}
        #: The lock rows this connection holds: key -> (table, run id), and when they were last refreshed.
        self._rows: dict[str, tuple[str, str]] = {}
        self._beaten = datetime.min

    def _connect(self, lock_timeout: float) -> Any:
        opened: list[Any] = []
        refused: list[StateFileLocked] = []

        def attempt() -> bool:
            try:
                opened.append(self.dialect.connect())
                return True
            except Exception as err:
                locked = self.dialect.file_locked(err)
                if locked is None:
                    raise
                path, pid = locked
                if not refused and lock_timeout > 0:
                    log.info(
                        "The state database file %s is open in another process (PID %s); "
                        "waiting up to %g s for it",
                        path,
                        pid,
                        lock_timeout,
                    )
                refused[:] = [StateFileLocked(path, pid, str(err))]
                return False

        if not wait_for(attempt, lock_timeout):
            raise refused[-1]
        return opened[0]

    def close(self) -> None:
        """Close the connection, rolling back anything uncommitted first; this releases its locks."""
        for key in list(self._own_locks):
            self._release_in_process(key)
        with suppress(Exception):
            self.conn.rollback()
        with suppress(Exception):
            self.conn.close()

    def names(self, tables: StateTables) -> TableSql:
        """The state tables' names as this database's SQL (quoted as its dialect quotes)."""
        return tables.in_sql(self.dialect)

    def state_sql(self, tables: StateTables) -> StateSql:
        """What the sync's statements read of ``tables`` on this database."""
        return StateSql.of(self.dialect, tables)

    # ---- locks -----------------------------------------------------------------------------------

    def create_tables(self, statements: Sequence[str], key: str) -> None:
        """Run ``CREATE TABLE IF NOT EXISTS`` statements in one transaction, one creator at a time.

        Two sessions creating the same table at once fail even with ``IF NOT EXISTS`` on some
        databases: PostgreSQL with a unique violation in its catalog, DuckDB with a write-write
        conflict. Two syncs of different lists on fresh tables would meet that, so creation takes
        the dialect's transaction-scoped lock on ``key`` (PostgreSQL's, across processes) and a
        process-wide lock everywhere.
        """
        with _CREATING, self.transaction():
            self.dialect.creation_lock(self.cur, key)
            for statement in statements:
                self.execute(statement)

    def try_lock(self, key: str, run_id: str, rows: str | None = None) -> LockHolder | None:
        """Take the sync lock ``key`` for this connection without waiting; ``rows``: the lock rows' table
        (as SQL), where the lock is a row (:func:`~abm_provider.accounts.sync.state.uses_lock_rows`).

        :return: ``None`` when this connection now holds it, else who holds it.
        """
        dialect = self.dialect
        if rows is not None:
            holder = self._take_in_process(key, run_id) or self._take_row(rows, key, run_id)
            if holder is not None:
                self._release_in_process(key)
            return holder
        if not dialect.capabilities.names_lock_holder:
            # This process's table names the run; it is all there is without a session lock.
            holder = self._take_in_process(key, run_id)
            if holder is not None or not dialect.capabilities.session_locks:
                return holder
        with self.transaction():
            if dialect.try_session_lock(self.cur, key, _LABEL_PREFIX + run_id):
                return None
            found = dialect.session_lock_holder(self.cur, key)
        self._release_in_process(key)
        if found is None:  # released between the two statements: the next try takes it
            return LockHolder(None, None, None)
        label, since, pid = found
        run = label[len(_LABEL_PREFIX) :] if label and label.startswith(_LABEL_PREFIX) else None
        return LockHolder(run or None, since, pid)

    def _take_row(self, table: str, key: str, run_id: str) -> LockHolder | None:
        """Write this run's lock row unless the list has a live one; ``None`` when it is this run's."""
        timestamp = self.dialect.type_sql("TIMESTAMP")
        for attempt in range(1, LOCK_ROW_TRIES + 1):
            now = utc_now()
            try:
                with self.transaction():
                    self.execute(locks.clear(table, key, run_id, now - LOCK_ROW_STALE_AFTER, timestamp))
                    self.execute(locks.take(table, key, run_id, now, timestamp))
                break
            except Exception as err:  # aborted for a concurrent transaction on the table
                log.info(
                    "Taking the lock row of %s failed (try %d of %d): %s", key, attempt, LOCK_ROW_TRIES, err
                )
                if attempt == LOCK_ROW_TRIES:
                    return LockHolder(None, None, None)
        found = self.rows(locks.holders(table, key))
        if found and found[0][0] == run_id:
            self._rows[key] = (table, run_id)
            self._beaten = datetime.now(UTC)
            return None
        if any(row[0] == run_id for row in found):  # two rows got in: the older one holds
            self.unlock_row(key, table, run_id)
        return LockHolder(str(found[0][0]), found[0][1], None) if found else LockHolder(None, None, None)

    def _beat(self) -> None:
        """Refresh this connection's lock rows, at most every :data:`LOCK_ROW_BEAT`, each in its own
        transaction (a failure is logged: the next commit tries again)."""
        now = datetime.now(UTC)
        if not self._rows or now - self._beaten < LOCK_ROW_BEAT:
            return
        self._beaten = now
        timestamp = self.dialect.type_sql("TIMESTAMP")
        for key, (table, run_id) in list(self._rows.items()):
            try:
                with self.transaction(beat=False):
                    self.execute(locks.beat(table, key, run_id, utc_now(), timestamp))
            except Exception as err:
                log.warning(
                    "Could not refresh the lock row of %s (%s); the next commit tries again", key, err
                )

    def unlock_row(self, key: str, table: str, run_id: str) -> None:
        """Delete this run's lock row of ``key``; a failure is logged (the row goes stale: taken over)."""
        self._rows.pop(key, None)
        try:
            with suppress(Exception):
                self.conn.rollback()
            with self.transaction(beat=False):
                self.execute(locks.release(table, key, run_id))
        except Exception as err:
            log.warning(
                "Could not delete the lock row of %s (%s): the next run takes it over after %s",
                key,
                err,
                LOCK_ROW_STALE_AFTER,
            )

    def unlock(self, key: str) -> None:
        """Release the sync lock ``key``; when that fails, close the connection, which releases it too."""
        if key in self._rows:
            self._release_in_process(key)
            table, run_id = self._rows[key]
            self.unlock_row(key, table, run_id)
            return
        mine = key in self._own_locks or self.dialect.capabilities.names_lock_holder
        self._release_in_process(key)
        if not (mine and self.dialect.capabilities.session_locks):
            return
        try:
            with suppress(Exception):
                self.conn.rollback()  # a failed statement may have left the transaction aborted
            with self.transaction():
                self.dialect.release_session_lock(self.cur, key)
        except Exception as err:
            log.warning("Could not release the sync lock (%s); closing the connection releases it", err)
            self.close()

    @cached_property
    def _identity(self) -> str:
        """The database this connection writes, as the in-process lock table knows it."""
        return self.dialect.identity(self.conn)

    def _take_in_process(self, key: str, run_id: str) -> LockHolder | None:
        """Take ``key`` in this process's lock table: ``None`` when taken, else who has it."""
        lock = (self._identity, key)
        with _IN_PROCESS_LOCKS_GUARD:
            holder = _IN_PROCESS_LOCKS.get(lock)
            if holder is not None:
                return holder
            mine = LockHolder(run_id, _now(), os.getpid())
            _IN_PROCESS_LOCKS[lock] = self._own_locks[key] = mine
            return None

    def _release_in_process(self, key: str) -> None:
        """Give back ``key`` if this connection took it; another connection's entry stays."""
        mine = self._own_locks.pop(key, None)
        if mine is None:
            return
        with _IN_PROCESS_LOCKS_GUARD:
            for lock, holder in list(_IN_PROCESS_LOCKS.items()):
                if lock[1] == key and holder is mine:
                    del _IN_PROCESS_LOCKS[lock]

    def marks(self, count: int) -> str:
        """``count`` bind markers of the driver, comma-separated (a ``VALUES`` list, an ``IN`` list)."""
        return ", ".join([self.marker] * count)

    def execute(self, statement: Sql | str, params: Sequence[Any] = ()) -> int:
        """Run a statement of the sync (its values bound in the dialect's style), or a text written with
        :attr:`marker` and its ``params``; return the rows it changed (-1 when the driver does not say)."""
        if isinstance(statement, Sql):
            if params:
                raise ValueError("a statement of the sync carries its own values: pass no params")
            text, bound = statement.bound(self.style)
            self.cur.execute(text, bound)
        else:
            self.cur.execute(statement, list(params))
        return int(self.cur.rowcount)

    def run_query(self, text: str, parameters: Mapping[str, Any] | Sequence[Any] | None) -> None:
        """Run a statement that holds a user's query, with the user's parameters, as common-sql does.

        ``SQLExecuteQueryOperator`` hands the driver the parameters only when there are some: with
        none, a format-style driver (psycopg, mysqlclient) reads ``%`` as text, as the user wrote it.
        """
        if parameters:
            self.cur.execute(text, parameters)
        else:
            self.cur.execute(text)

    def copy_query(
        self, table: str, statement: str, parameters: Mapping[str, Any] | Sequence[Any] | None
    ) -> str | None:
        """Run a user's query ``statement`` once, as written, into the numbered work table ``table``, in a
        transaction of its own; ``None`` when it did, else the first line of the database's refusal.

        Whatever the database makes of the query in a copy (a statement that is not a ``SELECT``, a
        column name repeated, a syntax of the driver's own), the caller still reads it as written,
        through its own connection.
        """
        try:
            with self.transaction():
                self.run_query(self.dialect.numbered_copy_sql(table, statement, RECORD), parameters)
        except Exception as err:
            return (str(err).strip().splitlines() or [type(err).__name__])[0]
        return None

    def executemany(self, statement: Sql | str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each row of values (a statement of the sync takes them at its row's
        places, :func:`~abm_provider.accounts.sync.statements.binding.row_values`)."""
        if not rows:
            return
        if isinstance(statement, Sql):
            text, bound = statement.bound_rows(self.style, rows)
            self.cur.executemany(text, bound)
        else:
            self.cur.executemany(statement, [list(r) for r in rows])

    def rows(self, statement: Sql | str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """All rows of a query (callers keep results small: counts, one batch, a sample)."""
        self.execute(statement, params)
        return [tuple(r) for r in self.cur.fetchall()]

    def value(self, statement: Sql | str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row, or ``None``."""
        found = self.rows(statement, params)
        return found[0][0] if found else None

    def analyze(self, *tables: str) -> None:
        """Refresh the planner's statistics of tables just filled in bulk, where the database keeps them.

        Without it, PostgreSQL's planner still believes a freshly filled plan table is empty and scans
        all of it for every batch recorded.
        """
        with self.transaction():
            for table in tables:
                self.dialect.analyze(self.cur, table)

    @contextmanager
    def transaction(self, *, beat: bool = True) -> Iterator[None]:
        """Everything inside commits together, or is rolled back when it raises. ``beat``: then refresh
        the lock rows this connection holds, when they are due."""
        self.dialect.begin_transaction(self.cur)
        try:
            yield
        except BaseException:
            with suppress(Exception):
                self.conn.rollback()
            raise
        self.conn.commit()
        if beat:
            self._beat()

    def stage(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        """Append rows to ``table`` by the database's bulk path."""
        if rows:
            self.dialect.insert_rows(self.cur, table, columns, rows)
