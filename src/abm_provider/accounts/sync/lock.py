"""One sync of a list at a time: the lock's setting, the wait, and what a refused run is told.

The database side of the lock (a PostgreSQL advisory lock, MySQL's ``GET_LOCK``, the DuckDB file, an
in-process lock; each dialect's) is :class:`~abm_provider.accounts.sync.database.StateDatabase`'s;
this module decides how long a run waits for it (``lock_timeout``) and turns a lock another sync has
into :class:`SyncAlreadyRunning`, naming the run that has it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.database import (
    LOCK_ROW_STALE_AFTER,
    LockHolder,
    StateDatabase,
    StateFileLocked,
    wait_for,
)
from abm_provider.common.arguments import check_number, parse_rendered
from abm_provider.exceptions import SyncAlreadyRunning

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook


def check_lock_timeout(value: object, name: str = "lock_timeout") -> float:
    """Seconds to wait for another sync of the list: a finite number >= 0, or its text once rendered."""
    return check_number(parse_rendered(value), name, 0, unit="seconds")


def open_state(hook: DbApiHook, list_id: str, run_id: str, lock_timeout: float) -> StateDatabase:
    """Connect to the state database of ``list_id``'s sync.

    A DuckDB file can be written by one process at a time, so there the file is the lock between
    processes: a file another process has open is waited for like the list's lock, then reported as
    :class:`SyncAlreadyRunning` instead of DuckDB's ``IOException``.
    """
    try:
        return StateDatabase(hook, lock_timeout=lock_timeout)
    except StateFileLocked as err:
        raise SyncAlreadyRunning(
            f"cannot sync list {list_id}: the state database file {err.path} is locked by "
            f"another process (PID {err.pid}), most likely another sync using the same file (DuckDB "
            f"lets one process write a file at a time). {_nothing_done(run_id, lock_timeout)}"
        ) from err


def hold_list_lock(
    db: StateDatabase,
    key: str,
    list_id: str,
    run_id: str,
    lock_timeout: float,
    log: logging.Logger | Any,
    rows: str | None = None,
) -> None:
    """Hold the list's lock ``key``, waiting up to ``lock_timeout`` seconds for another sync to end;
    ``rows``: the lock rows' table, where the lock is a row.

    :raises SyncAlreadyRunning: another sync still had it when the time was up, named in the message.
    """
    holders: list[LockHolder] = []

    def attempt() -> bool:
        holder = db.try_lock(key, run_id, rows)
        if holder is None:
            return True
        if not holders and lock_timeout > 0:
            log.info(
                "Another sync of list %s is running (%s); waiting up to %g s for it to end",
                list_id,
                holder.describe(),
                lock_timeout,
            )
        holders[:] = [holder]
        return False

    if not wait_for(attempt, lock_timeout):
        raise SyncAlreadyRunning(
            f"another sync of list {list_id} is running ({holders[-1].describe()}). "
            + _nothing_done(run_id, lock_timeout)
        )
    if holders:
        log.info("The other sync of list %s ended; this run goes on", list_id)
    _say_which_lock(db, list_id, log, rows)


def _say_which_lock(db: StateDatabase, list_id: str, log: logging.Logger | Any, rows: str | None) -> None:
    """Log which lock keeps this run of the list alone, as the state database's dialect declares it."""
    dialect = db.dialect
    if rows is not None:
        log.info(
            "List %s's lock is a row of %s, across processes; a run that stops without deleting it is "
            "taken over once it has not been refreshed for %s",
            list_id,
            rows,
            LOCK_ROW_STALE_AFTER,
        )
    elif dialect.capabilities.session_locks:
        log.info(
            "List %s's lock is a session lock of the %s database, across processes", list_id, dialect.name
        )
    elif dialect.capabilities.table_lock == "process":
        log.info(
            "List %s's lock is this process's: one process at a time writes a %s database",
            list_id,
            dialect.name,
        )
    else:
        log.warning(
            "List %s's lock is this process's only: the %s dialect has no lock between sessions, so a sync "
            "of this list in another process is not kept out; run one sync of a list at a time",
            list_id,
            dialect.name,
        )


def _nothing_done(run_id: str, lock_timeout: float) -> str:
    waited = f"waited {lock_timeout:g} s and " if lock_timeout else ""
    return (
        f"This run ({run_id}) {waited}read, sent and recorded nothing; the task's retries "
        "try again, or set lock_timeout to wait longer."
    )
