"""One connection to the state warehouse: bind-parameter SQL, transactions, and bulk staging.

The sync writes through one DB-API connection so its temporary source table and its transactions are
its own. The only per-database code is here: how a transaction opens (DuckDB's Python connection
commits each statement unless told otherwise), how rows are staged in bulk (DuckDB reads an Arrow
table, PostgreSQL takes ``COPY``, anything else gets ``executemany`` in chunks), and how a sync
takes its lock:

- **PostgreSQL**: a session-level advisory lock on a 64-bit hash of the lock's key. It belongs to the
  connection, so it spans the sync's many transactions, and it dies with the connection: a killed
  task cannot leave it behind. The holder names its run in its session's ``application_name``, so a
  refused run can say which run holds it (read back through ``pg_locks`` and ``pg_stat_activity``).
- **DuckDB**: a database file is opened for writing by one process at a time, so the file itself is
  the lock between processes (a second opener gets ``IOException: Could not set lock on file``).
  Connections of one process share the file, so inside a process a lock table kept in memory
  (:data:`_IN_PROCESS_LOCKS`) stands in.
- **Anything else**: only that in-process lock; nothing stops a sync in another process.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from airflow.providers.common.sql.hooks.sql import DbApiHook

from abm_provider.warehouse import dialect_of

log = logging.getLogger(__name__)

#: Seconds between two tries of a busy lock: a sync runs for seconds to minutes, so once a second is
#: prompt enough and costs the database nothing.
LOCK_POLL_INTERVAL = 1.0
#: The ``application_name`` prefix of a PostgreSQL session that holds a sync lock; the run id follows.
_APPLICATION_PREFIX = "abm_sync "
#: PostgreSQL keeps the first 63 bytes of an ``application_name``.
_APPLICATION_NAME_BYTES = 63
_DUCKDB_FILE_LOCKED = re.compile(r'Could not set lock on file "(?P<path>[^"]*)".*?\(PID (?P<pid>\d+)\)', re.S)


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


def lock_number(key: str) -> int:
    """The signed 64-bit number PostgreSQL's advisory locks take, stable across processes and versions."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


def _file_locked(err: BaseException) -> StateFileLocked | None:
    """The DuckDB "file is locked by another process" error as a :class:`StateFileLocked`, else ``None``."""
    match = _DUCKDB_FILE_LOCKED.search(str(err))
    if match is None or type(err).__name__ != "IOException":
        return None
    return StateFileLocked(match.group("path"), int(match.group("pid")), str(err))


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


class StateDatabase:
    """The state warehouse, through one connection; ``?`` in SQL text is the bind marker."""

    def __init__(self, hook: DbApiHook, *, lock_timeout: float = 0.0) -> None:
        """Connect; on DuckDB wait up to ``lock_timeout`` seconds for a file another process holds.

        :raises StateFileLocked: the DuckDB file stayed locked by another process.
        """
        self.hook = hook
        self.dialect = dialect_of(hook)
        self.marker = str(hook.placeholder)
        self.conn: Any = self._connect(lock_timeout)
        self.cur: Any = self.conn.cursor() if self.dialect != "duckdb" else self.conn
        self._own_locks: dict[str, LockHolder] = {}

    def _connect(self, lock_timeout: float) -> Any:
        if self.dialect != "duckdb":
            return self.hook.get_conn()
        opened: list[Any] = []
        refused: list[StateFileLocked] = []

        def attempt() -> bool:
            try:
                opened.append(self.hook.get_conn())
                return True
            except Exception as err:
                locked = _file_locked(err)
                if locked is None:
                    raise
                if not refused and lock_timeout > 0:
                    log.info(
                        "The state database file %s is open in another process (PID %s); "
                        "waiting up to %g s for it",
                        locked.path,
                        locked.pid,
                        lock_timeout,
                    )
                refused[:] = [locked]
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

    # ---- locks -----------------------------------------------------------------------------------

    def create_tables(self, statements: Sequence[str], key: str) -> None:
        """Run ``CREATE TABLE IF NOT EXISTS`` statements in one transaction, one creator at a time.

        Two sessions creating the same table at once fail even with ``IF NOT EXISTS``: PostgreSQL
        with a unique violation in its catalog, DuckDB with a write-write conflict. Two syncs of
        different lists on fresh tables would meet that, so creation takes a transaction-scoped
        advisory lock on ``key`` on PostgreSQL (and a process-wide lock everywhere).
        """
        with _CREATING, self.transaction():
            if self.dialect == "postgres":
                self.execute("SELECT pg_advisory_xact_lock(?)", [lock_number(key)])
            for statement in statements:
                self.execute(statement)

    def try_lock(self, key: str, run_id: str) -> LockHolder | None:
        """Take the sync lock ``key`` for this connection without waiting.

        :return: ``None`` when this connection now holds it, else who holds it.
        """
        if self.dialect != "postgres":
            return self._take_in_process(key, run_id)
        number = lock_number(key)
        with self.transaction():
            if self.value("SELECT pg_try_advisory_lock(?)", [number]):
                name = (_APPLICATION_PREFIX + run_id).encode()[:_APPLICATION_NAME_BYTES]
                self.execute(
                    "SELECT set_config('application_name', ?, false)", [name.decode(errors="ignore")]
                )
                return None
            # The lock's 64-bit key is split into two 32-bit halves in pg_locks.
            found = self.rows(
                "SELECT a.application_name, a.backend_start, l.pid FROM pg_locks l "
                "LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                "AND l.granted AND l.objsubid = 1 AND l.classid = CAST(? AS oid) "
                "AND l.objid = CAST(? AS oid) AND l.database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())",
                [(number >> 32) & 0xFFFFFFFF, number & 0xFFFFFFFF],
            )
        if not found:  # released between the two statements: the next try takes it
            return LockHolder(None, None, None)
        application, since, pid = found[0]
        application = str(application or "")
        run = application[len(_APPLICATION_PREFIX) :] if application.startswith(_APPLICATION_PREFIX) else None
        return LockHolder(run or None, since, int(pid) if pid is not None else None)

    def unlock(self, key: str) -> None:
        """Release the sync lock ``key``; when that fails, close the connection, which releases it too."""
        if self.dialect != "postgres":
            self._release_in_process(key)
            return
        try:
            with suppress(Exception):
                self.conn.rollback()  # a failed statement may have left the transaction aborted
            with self.transaction():
                self.execute("SELECT pg_advisory_unlock(?)", [lock_number(key)])
        except Exception as err:
            log.warning("Could not release the sync lock (%s); closing the connection releases it", err)
            self.close()

    @cached_property
    def _identity(self) -> str:
        """The database this connection writes, as the in-process lock table knows it."""
        if self.dialect == "duckdb":
            path = self.value("SELECT path FROM duckdb_databases() WHERE database_name = current_database()")
            # An in-memory database belongs to its connection alone.
            return f"duckdb:{os.path.realpath(path)}" if path else f"duckdb-memory:{id(self.conn)}"
        conn_id = getattr(self.hook, str(getattr(self.hook, "conn_name_attr", "")), None)
        return f"{self.dialect}:{type(self.hook).__name__}:{conn_id}"

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
