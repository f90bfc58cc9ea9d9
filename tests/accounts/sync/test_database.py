"""``StateDatabase``, the list sync's one connection to its state tables, on DuckDB, PostgreSQL and MariaDB.

Each database is reached as a sync reaches it, through the connection's common-sql hook, and what
one connection committed is read back through a second one. Lock keys are unique per test, so test
runs sharing the PostgreSQL server never meet.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import datetime
from typing import Any

import pytest
from sync_support import CONN_ID

from abm_provider.accounts.sync import database
from abm_provider.accounts.sync.database import (
    LOCK_POLL_INTERVAL,
    LockHolder,
    StateDatabase,
    lock_number,
    wait_for,
)
from abm_provider.accounts.sync.state import StateTables
from abm_provider.warehouse.connections import sql_hook
from support.warehouses import Warehouse

_WAIT = 60  # seconds an event may take before the test fails instead of hanging


class Target:
    """One test's fresh database: opens connections to it as a sync does, and closes them all."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse
        self.schema = warehouse.schema
        self.opened: list[StateDatabase] = []

    def connect(self) -> StateDatabase:
        """A connection of its own through the ``abm_warehouse`` connection's common-sql hook."""
        self.opened.append(StateDatabase(sql_hook(CONN_ID, "state_conn_id")))
        return self.opened[-1]

    def table(self, name: str) -> str:
        """``name`` in the test's own schema (the connection's default on DuckDB)."""
        return f"{self.schema}.{name}" if self.schema else name

    def tables(self) -> StateTables:
        """State tables under a prefix of their own."""
        return StateTables.named(f"t{uuid.uuid4().hex[:8]}_", self.schema)

    def close(self) -> None:
        for db in self.opened:
            db.close()


@pytest.fixture
def target(warehouse: Warehouse) -> Iterator[Target]:
    """The test's DuckDB file or PostgreSQL schema (the ``warehouse`` fixture's), as a sync reaches it."""
    found = Target(warehouse)
    yield found
    found.close()  # before the schema is dropped: an open transaction would block the drop


#: For what only PostgreSQL does.
postgres_only = pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
#: For what only MySQL and MariaDB do.
mariadb_only = pytest.mark.parametrize("warehouse", ["mariadb"], indirect=True)


def _key() -> str:
    return f"abm_provider.sync:test.{uuid.uuid4().hex}:list:L1"


# ---- statements ---------------------------------------------------------------------------------


def test_values_are_bound_never_spliced_into_the_sql(target: Target) -> None:
    db, table = target.connect(), target.table("t")
    db.execute(f"CREATE TABLE {table} (name VARCHAR(20), n BIGINT)")
    db.execute(f"INSERT INTO {table} VALUES ({db.marks(2)})", ["it's; DROP TABLE t", 1])
    db.executemany(f"INSERT INTO {table} VALUES ({db.marks(2)})", [["b", 2], ["c", 3]])
    db.executemany(f"INSERT INTO {table} VALUES ({db.marks(2)})", [])  # nothing to run
    assert db.rows(f"SELECT name, n FROM {table} WHERE n >= {db.marker} ORDER BY n", [1]) == [
        ("it's; DROP TABLE t", 1),
        ("b", 2),
        ("c", 3),
    ]
    assert db.value(f"SELECT n FROM {table} WHERE name = {db.marker}", ["c"]) == 3
    assert db.value(f"SELECT n FROM {table} WHERE name = {db.marker}", ["none"]) is None


def test_a_transaction_commits_together_or_not_at_all(target: Target) -> None:
    db, other, table = target.connect(), target.connect(), target.table("t")
    with db.transaction():
        db.execute(f"CREATE TABLE {table} (n BIGINT)")
    with db.transaction():
        db.execute(f"INSERT INTO {table} VALUES ({db.marker})", [1])
        db.execute(f"INSERT INTO {table} VALUES ({db.marker})", [2])
    with pytest.raises(RuntimeError, match="half way"), db.transaction():
        db.execute(f"INSERT INTO {table} VALUES ({db.marker})", [3])
        raise RuntimeError("half way")
    assert other.rows(f"SELECT n FROM {table} ORDER BY n") == [(1,), (2,)]


def test_stage_appends_rows_by_the_bulk_path_keeping_nulls_and_text_as_given(target: Target) -> None:
    db, other, table = target.connect(), target.connect(), target.table("staged")
    with db.transaction():
        db.execute(f"CREATE TABLE {table} (n BIGINT, name VARCHAR(40), note TEXT)")
    rows: list[tuple[Any, ...]] = [(1, "Zoë, Inc.", None), (2, None, 'a "quoted"\ttab'), (3, "", "\\N")]
    with db.transaction():
        db.stage(table, ["n", "name", "note"], rows)
        db.stage(table, ["n", "name", "note"], [])  # nothing to append
    assert other.rows(f"SELECT n, name, note FROM {table} ORDER BY n") == rows


def test_analyze_commits_and_on_postgresql_refreshes_the_row_estimate(target: Target) -> None:
    """A plan table just filled in bulk would otherwise look empty to PostgreSQL's planner."""
    db, table = target.connect(), target.table("filled")
    with db.transaction():
        db.execute(f"CREATE TABLE {table} (n BIGINT)")
        db.stage(table, ["n"], [(n,) for n in range(500)])
    db.analyze(table)
    assert target.connect().value(f"SELECT COUNT(*) FROM {table}") == 500
    if db.dialect.name == "postgres":
        assert (
            db.value(f"SELECT reltuples FROM pg_class WHERE oid = CAST({db.marker} AS regclass)", [table])
            == 500
        )


# ---- the state tables ---------------------------------------------------------------------------


def test_create_tables_makes_the_state_tables_and_can_run_again(target: Target) -> None:
    db, tables = target.connect(), target.tables()
    for _ in range(2):
        db.create_tables(tables.create_sql(db.dialect), tables.lock_key())
    for table in (tables.members, tables.plan, tables.rejects, tables.runs):
        assert db.value(f"SELECT COUNT(*) FROM {db.dialect.table_sql(table)}") == 0


def test_two_creators_of_the_same_fresh_tables_at_once_both_succeed(target: Target) -> None:
    """Unserialised, one of two sessions creating a table at once fails even with ``IF NOT EXISTS``."""
    tables = target.tables()
    start = threading.Barrier(2, timeout=_WAIT)
    errors: list[BaseException] = []

    def create() -> None:
        db = target.connect()
        try:
            start.wait()
            db.create_tables(tables.create_sql(db.dialect), tables.lock_key())
        except BaseException as err:
            errors.append(err)
        finally:
            db.close()

    threads = [threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_WAIT)
    assert errors == []
    db = target.connect()
    assert db.value(f"SELECT COUNT(*) FROM {db.names(tables).runs}") == 0


@postgres_only
def test_on_postgresql_creation_waits_for_another_session_creating_the_same_tables(target: Target) -> None:
    """The creation lock is PostgreSQL's, so it also serialises creators in other processes."""
    db, tables = target.connect(), target.tables()
    key = tables.lock_key()
    waiting = "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s"
    pid = _backend_pid(db)
    with closing(target.warehouse.connect()) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", [lock_number(key)])
        creator = threading.Thread(target=db.create_tables, args=(tables.create_sql(db.dialect), key))
        creator.start()
        assert _eventually(lambda: other.execute(waiting, [pid]).fetchone() == (1,))
        assert creator.is_alive()
        other.rollback()  # ends the other session's transaction, and its lock with it
        creator.join(_WAIT)
    assert not creator.is_alive()
    assert db.value(f"SELECT COUNT(*) FROM {db.names(tables).members}") == 0


# ---- the sync lock ------------------------------------------------------------------------------


def test_the_lock_goes_to_one_connection_and_the_other_is_told_which_run_has_it(target: Target) -> None:
    first, second, key = target.connect(), target.connect(), _key()
    assert first.try_lock(key, "run_a") is None
    holder = second.try_lock(key, "run_b")
    assert holder is not None
    assert holder.run_id == "run_a"
    assert isinstance(holder.since, datetime)
    assert holder.pid == (_backend_pid(first) if first.dialect.name == "postgres" else os.getpid())
    assert holder.describe().startswith("run id run_a, started ")

    first.unlock(key)
    assert second.try_lock(key, "run_b") is None
    taken = first.try_lock(key, "run_a")
    assert taken is not None and taken.run_id == "run_b"


def test_locks_of_different_keys_do_not_wait_for_each_other(target: Target) -> None:
    first, second = target.connect(), target.connect()
    assert first.try_lock(_key(), "run_a") is None
    assert second.try_lock(_key(), "run_b") is None


def test_closing_a_connection_releases_its_lock(target: Target) -> None:
    first, second, key = target.connect(), target.connect(), _key()
    assert first.try_lock(key, "run_a") is None
    first.close()
    # PostgreSQL releases a session's locks when its server process ends, just after the disconnect.
    assert _eventually(lambda: second.try_lock(key, "run_b") is None)


def test_unlocking_a_key_another_connection_has_leaves_it_with_that_connection(target: Target) -> None:
    first, second, key = target.connect(), target.connect(), _key()
    assert first.try_lock(key, "run_a") is None
    second.unlock(key)
    holder = second.try_lock(key, "run_b")
    assert holder is not None and holder.run_id == "run_a"


@postgres_only
def test_on_postgresql_a_long_run_id_is_reported_as_far_as_postgresql_keeps_it(target: Target) -> None:
    """The run id travels in ``application_name``, of which PostgreSQL keeps 63 bytes."""
    first, second, key = target.connect(), target.connect(), _key()
    run_id = "scheduled__2026-01-01T00:00:00+00:00_" + "x" * 100
    assert first.try_lock(key, run_id) is None
    holder = second.try_lock(key, "run_b")
    assert holder is not None
    assert holder.run_id == run_id[: 63 - len("abm_sync ")]


@postgres_only
def test_on_postgresql_a_lock_taken_outside_a_sync_is_reported_without_a_run_id(target: Target) -> None:
    db, key = target.connect(), _key()
    with closing(target.warehouse.connect(autocommit=True)) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [lock_number(key)])
        holder = db.try_lock(key, "run_b")
        assert holder is not None
        assert (holder.run_id, holder.pid) == (None, other.info.backend_pid)
        assert holder.describe().startswith("run id unknown, started ")
    assert _eventually(lambda: db.try_lock(key, "run_b") is None)  # the other session's end released it


@mariadb_only
def test_on_mariadb_a_lock_another_process_holds_is_refused_naming_its_connection(target: Target) -> None:
    """``GET_LOCK`` is the server's: a session of another process has it, with no run id to tell."""
    from abm_provider.warehouse.dialects.mysql import _lock_name

    db, key = target.connect(), _key()
    with closing(target.warehouse.connect()) as other:
        cur = other.cursor()
        cur.execute("SELECT GET_LOCK(%s, 0), CONNECTION_ID()", [_lock_name(key)])
        taken, connection = cur.fetchone()
        assert taken == 1
        holder = db.try_lock(key, "run_b")
        assert holder == LockHolder(None, None, connection)
        assert not database._IN_PROCESS_LOCKS or all(k != key for _, k in database._IN_PROCESS_LOCKS)
    assert _eventually(lambda: db.try_lock(key, "run_b") is None)  # the other session's end released it
    db.unlock(key)
    assert target.connect().try_lock(key, "run_c") is None


def test_the_lock_number_of_a_key_never_changes() -> None:
    """Syncs of two releases running at once must take the same PostgreSQL lock for a list."""
    assert lock_number("abm_provider.sync:.abm_sync_:list:L1") == -1987700982708389218
    assert lock_number("abm_provider.sync:.abm_sync_:tables") == -2204572982276876147


def test_a_holder_describes_only_what_is_known() -> None:
    assert LockHolder("r1", datetime(2026, 1, 2, 3, 4, 5), 42).describe() == (
        "run id r1, started 2026-01-02 03:04:05, PID 42"
    )
    assert LockHolder(None, None, 7).describe() == "run id unknown, PID 7"
    assert LockHolder(None, None, None).describe() == "run id unknown"


# ---- waiting ------------------------------------------------------------------------------------


def test_wait_for_tries_until_the_attempt_succeeds_pausing_at_most_the_poll_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(database, "_pause", pauses.append)
    answers = iter([False, False, True])
    assert wait_for(lambda: next(answers), 3600) is True
    assert len(pauses) == 2
    assert all(0 < pause <= LOCK_POLL_INTERVAL for pause in pauses)


def test_wait_for_with_no_timeout_tries_once(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(database, "_pause", pauses.append)
    attempts: list[int] = []
    assert wait_for(lambda: attempts.append(1) is not None, 0) is False
    assert (attempts, pauses) == ([1], [])
    assert wait_for(lambda: True, 0) is True


def test_wait_for_gives_up_once_the_timeout_has_passed() -> None:
    attempts: list[int] = []
    assert wait_for(lambda: attempts.append(1) is not None, 0.05) is False
    assert len(attempts) >= 2


# ---- helpers ------------------------------------------------------------------------------------


def _backend_pid(db: StateDatabase) -> int:
    return int(db.value("SELECT pg_backend_pid()"))


def _eventually(check: Callable[[], bool]) -> bool:
    """Whether ``check`` comes true within ``_WAIT`` seconds, polled."""
    deadline = time.monotonic() + _WAIT
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("given", [None, "200MB"], ids=["default", "set-by-the-connection"])
def test_a_duckdb_state_database_is_bounded_unless_its_connection_says(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    """The list sync's DuckDB holds at most 64 MB of its state in memory (it spills the rest), so a
    sync's peak memory does not grow with the list; a connection's own ``memory_limit`` wins."""
    from support.warehouses import duckdb_conn_env

    extra = {} if given is None else {"memory_limit": given}
    monkeypatch.setenv("AIRFLOW_CONN_STATE_DUCKDB", duckdb_conn_env(tmp_path / "state.duckdb", **extra))
    db = StateDatabase(sql_hook("state_duckdb", "state_conn_id"))
    try:
        limit = str(db.value("SELECT current_setting('memory_limit')"))
    finally:
        db.close()
    assert limit == ("61.0 MiB" if given is None else "190.7 MiB")
