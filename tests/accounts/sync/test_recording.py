"""``abm_provider.accounts.sync.recording``: what a run records of the service's answers, by whole syncs
against the emulator with the state on DuckDB, PostgreSQL and MariaDB.

A rerun resumes after the last recorded batch, after a lost answer or a SIGKILL, and sends only what
the record had not confirmed; a finished run's plan goes, a preview's stays until the next run plans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sync_support import (
    COLUMN_MAP,
    COLUMNS,
    CONN_ID,
    account_id,
    clear_requests,
    make_list,
    member_ids,
    membership_requests,
    rows_for,
    source,
    state_ids,
    sync,
)

from reliability.badinput_support import run_until_killed
from support.warehouses import Warehouse


def test_an_add_answered_503_after_it_took_effect_converges_on_a_rerun(
    abm: Any, warehouse: Warehouse
) -> None:
    """The batches answered before the failed one are recorded (grouped or not), so the retry resumes
    after them; the failed batch, which reached the list, comes back as duplicates."""
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(2500)))
    # The third add request (accounts 2000 to 2499) takes effect, then is answered 503.
    abm.inject_fault(
        origin="api",
        method="POST",
        path=r".*/accounts/add",
        kind="status",
        status=503,
        when="after",
        body_contains=account_id(2400),
    )
    with pytest.raises(Exception, match="503"):
        sync(warehouse, list_id, "run_1", max_in_flight=1)
    assert len(member_ids(abm, list_id)) == 2500
    assert len(state_ids(warehouse, list_id)) == 2000
    clear_requests(abm)
    retried = sync(warehouse, list_id, "run_1", max_in_flight=1)
    assert (retried["added"], retried["duplicates"]) == (2000, 500)
    assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == {account_id(n) for n in range(2500)}
    # The retry resumed after the recorded batches: one request, not three.
    assert membership_requests(abm)["add"] == 1


# Recorded three batches at a time, and killed when the second group is about to be recorded: the
# first group is recorded, the second (and the batch in flight beside it) reached the list.
_AFTER_ONE_GROUP = """
    from abm_provider.accounts.sync import sending
    from abm_provider.accounts.sync.recording import Recorder
    sending.RECORD_ACCOUNTS = 300
    original = Recorder.record_added
    calls = []
    def record(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            wait_to_be_killed()
        return original(self, *args, **kwargs)
    Recorder.record_added = record
"""

_SYNC = """
    from types import SimpleNamespace
    from abm_provider.operators.account_lists import AccountListSyncOperator
    run_id = kwargs.pop("run_id")
    ti = SimpleNamespace(dag_id="sync_test", task_id="sync", run_id=run_id, try_number=1, map_index=-1)
    AccountListSyncOperator(task_id="sync", **kwargs).execute({"ti": ti, "run_id": run_id})
"""


def _killed_after_one_group(warehouse: Warehouse, list_id: str, tmp_path: Path) -> None:
    """Run ``run_1`` of the list in a subprocess of its own, killed as its second group is recorded."""
    args = {
        "run_id": "run_1",
        "list_id": list_id,
        **source(warehouse),
        "sql_conn_id": CONN_ID,
        "state_schema": warehouse.schema,
        "column_map": COLUMN_MAP,
        "batch_size": 100,
        "max_in_flight": 2,
    }
    run_until_killed(tmp_path, _AFTER_ONE_GROUP, _SYNC, args)


@pytest.mark.parametrize("rerun", ["same_run", "next_run"])
def test_a_sync_killed_mid_send_then_run_again_gives_the_exact_membership(
    abm: Any, warehouse: Warehouse, tmp_path: Path, rerun: str
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(2000)))
    _killed_after_one_group(warehouse, list_id, tmp_path)
    on_list = member_ids(abm, list_id)
    assert state_ids(warehouse, list_id) == {account_id(n) for n in range(300)}
    assert len(on_list) >= 600  # the service is ahead of the record
    # The recorded group's plan rows went in its transaction; the rest wait for the resumed run.
    plan = warehouse.name("abm_sync_plan")
    left = f"SELECT MIN(seq), MAX(seq), COUNT(*) FROM {plan} WHERE list_id = %s"
    assert [tuple(int(v) for v in row) for row in warehouse.query(left, [list_id])] == [(301, 2000, 1700)]

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


def test_a_run_resumed_from_a_plan_that_kept_its_recorded_rows_leaves_no_plan(
    abm: Any, warehouse: Warehouse, tmp_path: Path
) -> None:
    """A plan left by 0.1 kept the rows it had recorded until the run was done; the run resumed here
    drops them with the rest, so they are not left in the table for good."""
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(2000)))
    _killed_after_one_group(warehouse, list_id, tmp_path)
    plan, members = warehouse.name("abm_sync_plan"), warehouse.name("abm_sync_members")
    recorded = warehouse.query(
        f"SELECT account_id, crm_org_id, crm_type, account_name, row_hash FROM {members} "
        "WHERE list_id = %s ORDER BY account_id",
        [list_id],
    )
    for seq, row in enumerate(recorded, start=1):  # as 0.1 left them: recorded, still in the plan
        warehouse.execute(
            f"INSERT INTO {plan} (list_id, run_id, action, seq, account_id, crm_org_id, crm_type, "
            "account_name, row_hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [list_id, "run_1", "add", seq, *row],
        )
    result = sync(warehouse, list_id, "run_1", batch_size=100)
    assert result["added"] + result["duplicates"] == 2000
    assert warehouse.count(plan, "list_id = %s", [list_id]) == 0


def test_a_done_run_leaves_no_plan_and_a_dry_run_keeps_its_own(abm: Any, warehouse: Warehouse) -> None:
    """A finished run's plan goes when it is done (the run log keeps what happened), so the next run
    does not pay for deleting it; a preview's plan stays for the reader until the next run plans."""
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(5)))
    sync(warehouse, list_id, "run_1")
    plan = warehouse.name("abm_sync_plan")
    assert warehouse.count(plan, "list_id = %s", [list_id]) == 0
    warehouse.replace_table("targets", COLUMNS, rows_for(range(7)))
    sync(warehouse, list_id, "run_2", dry_run=True)
    assert warehouse.query(
        f"SELECT run_id, COUNT(*) FROM {plan} WHERE list_id = %s GROUP BY run_id", [list_id]
    ) == [("run_2", 2)]
