"""``ListSync`` (``accounts/sync/engine.py``) end to end, through ``AccountListSyncOperator``: a whole
run against the emulator, with the state on DuckDB and on PostgreSQL.

The sections follow a run's steps: the plan (``plan.py``: what is sent, skipped or refused), sending
(``sending.py``: what a request carries, removals first) and recording (``recording.py``: a rerun
resumes after the last recorded batch, after a lost answer or a SIGKILL). What reaches the service
is read from the emulator's request log and its admin view of the list, never from the operator's
own summary; the warehouse is read with the database's own driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sync_support import (
    COLUMN_MAP,
    COLUMNS,
    CONN_ID,
    ORG,
    Warehouse,
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

from abm_provider.accounts.sync import SUMMARY_KEYS, engine
from abm_provider.common.rejects import TooManyRejects
from reliability.badinput_support import run_until_killed

NOT_FOUND = "002000000000000099"  # well formed, but not an account id: the service reports it not found


# ---- whole runs --------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_a_large_source_is_synced_then_only_the_change_is_sent_then_nothing(
    abm: Any, warehouse: Warehouse
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(100_000)))

    clear_requests(abm)
    first = sync(warehouse, list_id, "run_1")
    assert (first["to_add"], first["added"], first["to_remove"], first["removed"]) == (100_000, 100_000, 0, 0)
    assert membership_requests(abm) == {"add": 100, "remove": 0}
    assert member_ids(abm, list_id) == {account_id(n) for n in range(100_000)}

    # 1% changed: 500 accounts left the target set and 500 joined.
    changed = list(range(500, 100_500))
    warehouse.replace_table("targets", COLUMNS, rows_for(changed))
    clear_requests(abm)
    second = sync(warehouse, list_id, "run_2")
    assert (second["to_add"], second["added"], second["to_remove"], second["removed"]) == (500, 500, 500, 500)
    assert membership_requests(abm) == {"add": 1, "remove": 1}
    expected = {account_id(n) for n in changed}
    assert member_ids(abm, list_id) == expected
    assert state_ids(warehouse, list_id) == expected

    clear_requests(abm)
    third = sync(warehouse, list_id, "run_3")
    assert (third["to_add"], third["to_remove"], third["added"], third["removed"]) == (0, 0, 0, 0)
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert third["state_count"] == third["service_count"] == 100_000
    assert set(first) >= set(SUMMARY_KEYS)


def test_add_only_never_removes(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(50)))
    sync(warehouse, list_id, "run_1", mode="add_only")
    warehouse.replace_table("targets", COLUMNS, rows_for(range(30, 60)))
    clear_requests(abm)
    second = sync(warehouse, list_id, "run_2", mode="add_only")
    assert (second["to_add"], second["to_remove"], second["removed"]) == (10, 0, 0)
    assert membership_requests(abm)["remove"] == 0
    assert member_ids(abm, list_id) == {account_id(n) for n in range(60)}


def test_dry_run_sends_nothing_and_reports_the_plan(abm: Any, warehouse: Warehouse, capsys: Any) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(20)))
    sync(warehouse, list_id, "run_1")
    warehouse.replace_table("targets", COLUMNS, [*rows_for(range(5, 27)), ("bad id", "Bad", ORG)])
    clear_requests(abm)
    capsys.readouterr()
    preview = sync(warehouse, list_id, "run_2", dry_run="true")
    assert preview["dry_run"] is True
    assert (preview["to_add"], preview["to_remove"], preview["rejected"]) == (7, 5, 1)
    assert (preview["added"], preview["removed"]) == (0, 0)
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert member_ids(abm, list_id) == {account_id(n) for n in range(20)}
    assert state_ids(warehouse, list_id) == {account_id(n) for n in range(20)}
    assert f"e.g. to add: {account_id(20)}@{ORG}" in capsys.readouterr().out
    # The preview recorded no reject, so the real run counts (and records) the bad row.
    real = sync(warehouse, list_id, "run_2", max_rejected=1)
    assert (real["dry_run"], real["added"], real["removed"], real["rejected"]) == (False, 7, 5, 1)
    assert member_ids(abm, list_id) == {account_id(n) for n in range(5, 27)}


def test_an_edit_during_a_run_is_sent_by_the_next_run(
    abm: Any, warehouse: Warehouse, monkeypatch: Any
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(10)))
    original = engine.ListSync._send_run

    def edit_then_send(self: Any, run: Any) -> None:
        # Through the sync's own connection: DuckDB allows one configuration per file in a process.
        for row in rows_for(range(10, 12)):
            self.db.execute(f"INSERT INTO {warehouse.name('targets')} VALUES ({self.db.marks(3)})", row)
        self.db.conn.commit()
        original(self, run)

    monkeypatch.setattr(engine.ListSync, "_send_run", edit_then_send)
    first = sync(warehouse, list_id, "run_1")
    monkeypatch.setattr(engine.ListSync, "_send_run", original)
    assert first["added"] == 10
    assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == {account_id(n) for n in range(10)}
    second = sync(warehouse, list_id, "run_2")
    assert second["added"] == 2
    assert member_ids(abm, list_id) == {account_id(n) for n in range(12)}


# ---- the plan ----------------------------------------------------------------------------------------


def test_a_refused_row_is_not_sent_again_until_it_changes(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    source = [*rows_for(range(3)), (NOT_FOUND, "Ghost", ORG), ("has space", "Bad", ORG)]
    warehouse.replace_table("targets", COLUMNS, source)
    first = sync(warehouse, list_id, "run_1", max_rejected=None)
    assert (first["added"], first["not_found"], first["rejected"]) == (3, 1, 1)
    reasons = dict(
        warehouse.query(f"SELECT account_id, reason FROM {warehouse.name('abm_sync_rejects')} ORDER BY 1")
    )
    assert reasons[NOT_FOUND].startswith("not found")
    assert "whitespace" in reasons["has space"]

    clear_requests(abm)
    second = sync(warehouse, list_id, "run_2", max_rejected=0)
    assert (second["to_add"], second["not_found"], second["rejected"], second["held"]) == (0, 0, 0, 2)
    assert membership_requests(abm) == {"add": 0, "remove": 0}

    # A corrected value is a change: the row is sent again.
    source[3] = (NOT_FOUND, "Ghost, renamed", ORG)
    warehouse.replace_table("targets", COLUMNS, source)
    clear_requests(abm)
    third = sync(warehouse, list_id, "run_3", max_rejected=0)
    assert (third["to_add"], third["not_found"], third["held"]) == (1, 1, 1)
    assert membership_requests(abm) == {"add": 1, "remove": 0}
    assert member_ids(abm, list_id) == {account_id(n) for n in range(3)}


def test_too_many_invalid_rows_send_and_record_nothing(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    warehouse.replace_table(
        "targets", COLUMNS, [*rows_for(range(10)), ("bad 1", "x", ORG), ("bad 2", "y", ORG)]
    )
    for run_id in ("run_1", "run_2"):  # nothing recorded, so the next run fails the same way
        with pytest.raises(TooManyRejects, match="2 of 12"):
            sync(warehouse, list_id, run_id, max_rejected=1)
    assert member_ids(abm, list_id) == set()
    assert state_ids(warehouse, list_id) == set()
    assert sync(warehouse, list_id, "run_3", max_rejected=0.2)["added"] == 10


# ---- sending -----------------------------------------------------------------------------------------


def test_accounts_given_by_id_alone_are_added(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", ["id"], [(account_id(n),) for n in range(3)])
    result = sync(warehouse, list_id, "run_1", column_map=None)
    assert (result["added"], result["rejected"]) == (3, 0)
    members = abm.members(list_id)
    assert {m["id"] for m in members} == {account_id(n) for n in range(3)}
    assert {(m["crmOrgId"], m["crmType"]) for m in members} == {(abm.crm_org_id(), "SALESFORCE")}
    # Still in step on the next run: nothing is sent again, and a departed account is removed.
    warehouse.replace_table("targets", ["id"], [(account_id(n),) for n in range(2)])
    clear_requests(abm)
    again = sync(warehouse, list_id, "run_2", column_map=None, max_removals=None)  # 1 of 3 goes
    assert (again["to_add"], again["removed"]) == (0, 1)
    assert member_ids(abm, list_id) == {account_id(0), account_id(1)}


def test_a_key_that_moves_from_no_org_to_its_org_stays_on_the_list(abm: Any, warehouse: Warehouse) -> None:
    """Removals go first, so the account given by id alone, then with the org the service filled in,
    ends on the list (sent the other way round, the removal would take the new membership away)."""
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, [(account_id(1), "A", None)])
    sync(warehouse, list_id, "run_1")
    warehouse.replace_table("targets", COLUMNS, [(account_id(1), "A", abm.crm_org_id())])
    result = sync(warehouse, list_id, "run_2", max_removals=None)  # the key's old form is removed
    assert (result["to_add"], result["to_remove"]) == (1, 1)
    assert member_ids(abm, list_id) == {account_id(1)}


# ---- recording ---------------------------------------------------------------------------------------


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
    assert warehouse.query(f"SELECT COUNT(*) FROM {plan} WHERE list_id = %s", [list_id]) == [(0,)]


def test_a_done_run_leaves_no_plan_and_a_dry_run_keeps_its_own(abm: Any, warehouse: Warehouse) -> None:
    """A finished run's plan goes when it is done (the run log keeps what happened), so the next run
    does not pay for deleting it; a preview's plan stays for the reader until the next run plans."""
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(5)))
    sync(warehouse, list_id, "run_1")
    plan = warehouse.name("abm_sync_plan")
    assert warehouse.query(f"SELECT COUNT(*) FROM {plan} WHERE list_id = %s", [list_id]) == [(0,)]
    warehouse.replace_table("targets", COLUMNS, rows_for(range(7)))
    sync(warehouse, list_id, "run_2", dry_run=True)
    assert warehouse.query(
        f"SELECT run_id, COUNT(*) FROM {plan} WHERE list_id = %s GROUP BY run_id", [list_id]
    ) == [("run_2", 2)]


def test_a_key_given_twice_is_added_once_with_its_first_row(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    rows = [(account_id(1), "First", ORG), (account_id(2), "Other", ORG), (account_id(1), "Second", ORG)]
    warehouse.replace_table("targets", COLUMNS, rows)
    result = sync(warehouse, list_id, "run_1")
    assert (result["to_add"], result["added"]) == (2, 2)
    names = dict(
        warehouse.query(
            f"SELECT account_id, account_name FROM {warehouse.name('abm_sync_members')} WHERE list_id = %s",
            [list_id],
        )
    )
    assert names == {account_id(1): "First", account_id(2): "Other"}
