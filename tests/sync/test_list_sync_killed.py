"""A sync task SIGKILLed mid-send, then run again: the list and the state end exact.

The task runs in a fresh interpreter and is killed (no ``finally``, no rollback) once the service
has answered a batch the state has not recorded yet: the service is then ahead of the record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sync_support import (
    COLUMN_MAP,
    COLUMNS,
    CONN_ID,
    Warehouse,
    account_id,
    clear_requests,
    make_list,
    member_ids,
    membership_requests,
    rows_for,
    state_ids,
    sync,
)

from reliability.badinput_support import run_until_killed

# Killed when the fourth answered batch is about to be recorded: three batches are recorded, the
# fourth (and the one in flight beside it) reached the list.
_AFTER_THREE_BATCHES = """
    from abm_provider.accounts.sync import engine
    original = engine.ListSync._record_added
    calls = []
    def record(self, *args):
        calls.append(1)
        if len(calls) == 4:
            wait_to_be_killed()
        return original(self, *args)
    engine.ListSync._record_added = record
"""
_SYNC = """
    from types import SimpleNamespace
    from abm_provider.operators.account_lists import AccountListSyncOperator
    run_id = kwargs.pop("run_id")
    ti = SimpleNamespace(dag_id="sync_test", task_id="sync", run_id=run_id, try_number=1, map_index=-1)
    AccountListSyncOperator(task_id="sync", **kwargs).execute({"ti": ti, "run_id": run_id})
"""


@pytest.mark.parametrize("rerun", ["same_run", "next_run"])
def test_a_sync_killed_mid_send_then_run_again_gives_the_exact_membership(
    abm: Any, warehouse: Warehouse, tmp_path: Path, rerun: str
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(2000)))
    args = {
        "run_id": "run_1",
        "list_id": list_id,
        "table": warehouse.name("targets"),
        "sql_conn_id": CONN_ID,
        "state_schema": warehouse.schema,
        "column_map": COLUMN_MAP,
        "batch_size": 100,
        "max_in_flight": 2,
    }
    run_until_killed(tmp_path, _AFTER_THREE_BATCHES, _SYNC, args)
    on_list = member_ids(abm, list_id)
    assert state_ids(warehouse, list_id) == {account_id(n) for n in range(300)}
    assert len(on_list) >= 400  # the service is ahead of the record

    clear_requests(abm)
    result = sync(warehouse, list_id, "run_1" if rerun == "same_run" else "run_2", batch_size=100)
    expected = {account_id(n) for n in range(2000)}
    assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == expected
    # Only what the record had not confirmed is sent again: batches 4 to 20.
    assert membership_requests(abm) == {"add": 17, "remove": 0}
    if rerun == "same_run":
        assert result["added"] + result["duplicates"] == 2000
    else:
        assert (result["to_add"], result["to_remove"]) == (0, 0)
