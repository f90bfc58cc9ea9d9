"""The list sync with its source and state on Snowflake (fakesnow) and BigQuery (bqemulator), where its
one run per list is a row of ``<prefix>locks`` (``statements/locks.py``): the databases have no lock a
session keeps. A second run sends only the change, a guard trips, a run of the list another process
holds is refused naming it, a row left by a dead run is taken over, and the row goes with the run.

"Another process" is a second state connection whose in-process lock entry is dropped, so only the row
keeps the two apart. Each database is read back with its own client, never through the code under test.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from abm_provider.accounts.sync import database
from abm_provider.accounts.sync.database import StateDatabase
from abm_provider.accounts.sync.state import StateTables, utc_now
from abm_provider.exceptions import SyncAlreadyRunning, SyncGuardTripped
from abm_provider.operators.account_lists import AccountListSyncOperator
from abm_provider.warehouse.connections import sql_hook
from accounts.sync.sync_support import (
    COLUMN_MAP,
    account_id,
    clear_requests,
    context,
    make_list,
    member_ids,
    rows_for,
    sent_ids,
)
from support.cloud_state import CLOUD_KINDS, CONN_ID, CloudState, open_cloud


def replace_source(cloud: CloudState, numbers: range | list[int]) -> None:
    """The source table ``targets`` holding the accounts ``numbers``."""
    cloud.replace_table("targets", ["account_id", "account_name", "crm_org_id"], rows_for(numbers))


def lock_rows(cloud: CloudState) -> list[tuple[Any, ...]]:
    return cloud.query(f"SELECT lock_key, run_id FROM {cloud.name('abm_sync_locks')}")


@pytest.fixture(params=CLOUD_KINDS)
def cloud(request: pytest.FixtureRequest, abm: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudState]:
    """``abm_warehouse`` on a database of the test's own on the emulator, the source in it."""
    state = open_cloud(request, request.param, monkeypatch)
    replace_source(state, range(1, 21))
    yield state


def sync(cloud: CloudState, list_id: str, run_id: str, **kwargs: Any) -> dict[str, Any]:
    operator = AccountListSyncOperator(
        task_id="sync",
        list_id=list_id,
        sql_conn_id=CONN_ID,
        table=cloud.name("targets"),
        state_schema=cloud.schema,
        column_map=COLUMN_MAP,
        max_attempts=1,
        **kwargs,
    )
    result: dict[str, Any] = operator.execute(context(run_id))
    return result


def other_process_holds(cloud: CloudState, list_id: str, run_id: str) -> StateDatabase:
    """A state connection that holds the list's lock row as another process would (no in-process entry)."""
    tables = StateTables.named(schema=cloud.schema)
    db = StateDatabase(sql_hook(CONN_ID, "state_conn_id"))
    db.create_tables(tables.create_sql(db.dialect), tables.lock_key())
    key = tables.lock_key(list_id)
    assert db.try_lock(key, run_id, db.dialect.table_sql(tables.locks)) is None
    database._IN_PROCESS_LOCKS.pop((db._identity, key))
    db._own_locks.pop(key)
    return db


def test_a_second_run_sends_only_the_change_and_leaves_no_lock_row(abm: Any, cloud: CloudState) -> None:
    list_id = make_list()
    first = sync(cloud, list_id, "run-1")
    assert (first["added"], first["removed"]) == (20, 0)
    assert lock_rows(cloud) == []

    replace_source(cloud, [*range(3, 21), 21, 22, 23])
    clear_requests(abm)
    second = sync(cloud, list_id, "run-2")

    assert (second["added"], second["removed"]) == (3, 2)
    assert sorted(sent_ids(abm, "add")) == [account_id(n) for n in (21, 22, 23)]
    assert sorted(sent_ids(abm, "remove")) == [account_id(n) for n in (1, 2)]
    assert member_ids(abm, list_id) == {account_id(n) for n in [*range(3, 21), 21, 22, 23]}
    assert lock_rows(cloud) == []


def test_a_guard_trips_before_anything_is_sent(abm: Any, cloud: CloudState) -> None:
    list_id = make_list()
    sync(cloud, list_id, "run-1")
    replace_source(cloud, range(1, 5))
    clear_requests(abm)

    with pytest.raises(SyncGuardTripped, match="max_removals"):
        sync(cloud, list_id, "run-2", max_removals=0.25)

    assert sent_ids(abm, "remove") == []
    assert len(member_ids(abm, list_id)) == 20
    assert lock_rows(cloud) == []


def test_a_run_of_the_list_another_process_holds_is_refused_naming_it(abm: Any, cloud: CloudState) -> None:
    list_id = make_list()
    holder = other_process_holds(cloud, list_id, "run-elsewhere")
    try:
        with pytest.raises(SyncAlreadyRunning, match="run id run-elsewhere"):
            sync(cloud, list_id, "run-2")
        assert member_ids(abm, list_id) == set()
    finally:
        holder.unlock(StateTables.named(schema=cloud.schema).lock_key(list_id))
        holder.close()
    assert sync(cloud, list_id, "run-3")["added"] == 20


def test_a_row_its_run_stopped_refreshing_is_taken_over(
    abm: Any, cloud: CloudState, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_id = make_list()
    holder = other_process_holds(cloud, list_id, "run-that-died")
    holder.close()  # killed: the row stays
    at = (utc_now() - database.LOCK_ROW_STALE_AFTER - timedelta(minutes=1)).isoformat(sep=" ")
    cloud.query(
        f"UPDATE {cloud.name('abm_sync_locks')} SET heartbeat_at = CAST('{at}' AS TIMESTAMP) WHERE TRUE"
    )

    assert sync(cloud, list_id, "run-2")["added"] == 20
    assert lock_rows(cloud) == []
