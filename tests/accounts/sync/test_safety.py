"""A list sync that is safe to leave running (issue 29): guards, the run log, control.

Each test runs ``AccountListSyncOperator`` against the emulator with the state on DuckDB, PostgreSQL and
MariaDB, and reads what reached the service from the emulator's request log (with each request's
body) and its admin view of the list, never from the operator's own summary alone; the warehouse is
read with the database's own driver. The retry policy of accounts not found is ``test_clock.py``'s.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sync_support import (
    COLUMNS,
    NOT_FOUND,
    ORG,
    account_id,
    clear_requests,
    make_list,
    member_ids,
    membership_requests,
    rows_for,
    sent_ids,
    state_ids,
    sync,
)

from abm_provider.exceptions import SyncGuardTripped
from abm_provider.hooks.abm import AbmHook
from support.warehouses import Warehouse


def run_status(warehouse: Warehouse, list_id: str, run_id: str) -> str:
    rows = warehouse.query(
        f"SELECT status FROM {warehouse.name('abm_sync_runs')} WHERE list_id = %s AND run_id = %s",
        [list_id, run_id],
    )
    return str(rows[0][0])


def run_log(warehouse: Warehouse, list_id: str, run_id: str) -> set[tuple[str, str, str | None]]:
    rows = warehouse.query(
        f"SELECT action, outcome, account_id FROM {warehouse.name('abm_sync_log')} "
        "WHERE list_id = %s AND run_id = %s",
        [list_id, run_id],
    )
    return {(str(a), str(o), None if i is None else str(i)) for a, o, i in rows}


def start_with(abm: Any, warehouse: Warehouse, numbers: range, **kwargs: Any) -> str:
    """A list synced from ``numbers``; the request log cleared after."""
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(numbers))
    sync(warehouse, list_id, "run_1", **kwargs)
    clear_requests(abm)
    return list_id


# ---- guards ------------------------------------------------------------------------------------------


def test_an_empty_source_fails_and_nothing_is_sent(abm: Any, warehouse: Warehouse) -> None:
    list_id = start_with(abm, warehouse, range(10))
    warehouse.replace_table("targets", COLUMNS, [])
    with pytest.raises(SyncGuardTripped, match="allow_empty_source=True") as raised:
        sync(warehouse, list_id, "run_2", max_removals=None)
    assert raised.value.guard == "allow_empty_source"
    assert "remove all 10 recorded members" in str(raised.value)
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert len(member_ids(abm, list_id)) == 10
    assert len(state_ids(warehouse, list_id)) == 10
    assert run_status(warehouse, list_id, "run_2") == "blocked"

    emptied = sync(warehouse, list_id, "run_2", max_removals=None, allow_empty_source=True)
    assert emptied["removed"] == 10
    assert member_ids(abm, list_id) == set()


def test_a_30_percent_removal_fails_with_the_default_guard_and_goes_through_with_the_override(
    abm: Any, warehouse: Warehouse
) -> None:
    list_id = start_with(abm, warehouse, range(10))
    warehouse.replace_table("targets", COLUMNS, rows_for(range(3, 10)))
    with pytest.raises(SyncGuardTripped) as raised:
        sync(warehouse, list_id, "run_2")
    message = str(raised.value)
    assert "removes 3 of the 10 recorded members (30.0%)" in message
    assert "max_removals=0.25" in message and "max_removals=None" in message
    assert "abm_sync_plan" in message and "run_2" in message
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert len(member_ids(abm, list_id)) == 10

    # The kept plan is readable: the three removals it would have sent.
    plan = warehouse.query(
        f"SELECT account_id FROM {warehouse.name('abm_sync_plan')} WHERE list_id = %s AND run_id = %s "
        "AND action = 'remove'",
        [list_id, "run_2"],
    )
    assert {r[0] for r in plan} == {account_id(n) for n in range(3)}

    # A count at the plan's size lets it through; so would None.
    done = sync(warehouse, list_id, "run_2", max_removals=3)
    assert (done["removed"], done["guard"]) == (3, None)
    assert sorted(sent_ids(abm, "remove")) == [account_id(n) for n in range(3)]
    assert member_ids(abm, list_id) == {account_id(n) for n in range(3, 10)}


def test_a_dry_run_reports_the_guard_it_would_trip_without_failing(abm: Any, warehouse: Warehouse) -> None:
    list_id = start_with(abm, warehouse, range(4))
    warehouse.replace_table("targets", COLUMNS, rows_for(range(2)))
    preview = sync(warehouse, list_id, "run_2", dry_run=True)
    assert (preview["to_remove"], preview["guard"], preview["dry_run"]) == (2, "max_removals", True)
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert sync(warehouse, list_id, "run_3", max_removals=None)["guard"] is None


def test_a_batch_refused_with_400_for_one_account_adds_the_rest_and_holds_that_one(
    abm: Any, warehouse: Warehouse
) -> None:
    list_id = make_list()
    bad = account_id(5)
    warehouse.replace_table("targets", COLUMNS, rows_for(range(10)))
    abm.inject_fault(
        kind="status", status=400, method="POST", path=r".*/accounts/add", body_contains=bad, count=None
    )
    clear_requests(abm)
    first = sync(warehouse, list_id, "run_1")
    assert (first["added"], first["rejected"]) == (9, 1)
    assert member_ids(abm, list_id) == {account_id(n) for n in range(10)} - {bad}
    assert state_ids(warehouse, list_id) == member_ids(abm, list_id)
    # Halving: 10 -> 5 + 5 -> ... finds the one account in a few requests, each good one added once.
    assert sent_ids(abm, accepted_only=True).count(account_id(0)) == 1
    assert bad not in sent_ids(abm, accepted_only=True)
    assert membership_requests(abm)["add"] <= 8
    reason = warehouse.query(
        f"SELECT action, reason FROM {warehouse.name('abm_sync_rejects')} WHERE account_id = %s", [bad]
    )
    assert reason[0][0] == "refused" and "400" in reason[0][1]
    assert ("add", "invalid", bad) in run_log(warehouse, list_id, "run_1")

    abm.clear_faults()
    clear_requests(abm)
    second = sync(warehouse, list_id, "run_2")
    assert (second["to_add"], second["held"]) == (0, 1)
    assert sent_ids(abm) == []


# ---- the run log ---------------------------------------------------------------------------------------


def test_the_run_log_says_what_happened_to_each_account_and_keeps_its_retention(
    abm: Any, warehouse: Warehouse
) -> None:
    list_id = make_list()
    rows = [*rows_for(range(4)), (NOT_FOUND, "Ghost", ORG), ("has space", "Bad", ORG)]
    warehouse.replace_table("targets", COLUMNS, rows)
    first = sync(warehouse, list_id, "run_1", max_rejected=None)
    assert first["run_id"] == "run_1"
    assert run_log(warehouse, list_id, "run_1") == {
        *{("add", "added", account_id(n)) for n in range(4)},
        ("add", "not_found", NOT_FOUND),
        ("none", "invalid", "has space"),
    }

    # The next run removes 0, adds 9, and skips the two rows refused before as held, with their reasons.
    rows = [*rows_for(range(1, 4)), (account_id(9), "New", ORG), (NOT_FOUND, "Ghost", ORG), rows[5]]
    warehouse.replace_table("targets", COLUMNS, rows)
    sync(warehouse, list_id, "run_2", max_rejected=None, max_removals=None)
    assert run_log(warehouse, list_id, "run_2") == {
        ("remove", "removed", account_id(0)),
        ("add", "added", account_id(9)),
        ("none", "held", NOT_FOUND),
        ("none", "held", "has space"),
    }
    reasons = dict(
        warehouse.query(
            f"SELECT account_id, reason FROM {warehouse.name('abm_sync_log')} WHERE run_id = %s "
            "AND outcome = 'held'",
            ["run_2"],
        )
    )
    assert reasons[NOT_FOUND].startswith("not found") and "whitespace" in reasons["has space"]

    # An account added behind the sync's back is logged as a duplicate when the sync sends it.
    AbmHook().add_accounts(list_id, [{"id": account_id(7), "crmOrgId": ORG}])
    warehouse.replace_table("targets", COLUMNS, [*rows, (account_id(7), "Seven", ORG)])
    sync(warehouse, list_id, "run_3", max_rejected=None)
    assert ("add", "duplicate", account_id(7)) in run_log(warehouse, list_id, "run_3")

    # Retention: rows logged more than log_retention_days ago go at the next run; newer ones stay.
    old = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=8)
    for table, column in (("abm_sync_log", "logged_at"), ("abm_sync_runs", "started_at")):
        warehouse.execute(
            f"UPDATE {warehouse.name(table)} SET {column} = %s WHERE run_id = %s", [old, "run_1"]
        )
    sync(warehouse, list_id, "run_4", max_rejected=None, log_retention_days=7)
    assert run_log(warehouse, list_id, "run_1") == set()
    assert run_log(warehouse, list_id, "run_2") != set()


# ---- control -------------------------------------------------------------------------------------------


def test_full_resync_rebuilds_a_list_edited_behind_the_syncs_back(abm: Any, warehouse: Warehouse) -> None:
    list_id = start_with(abm, warehouse, range(10))
    behind = [{"id": account_id(n), "crmOrgId": ORG} for n in range(3)]
    AbmHook().remove_accounts(list_id, behind)
    assert sync(warehouse, list_id, "run_2")["to_add"] == 0  # by our record, nothing changed
    assert len(member_ids(abm, list_id)) == 7

    clear_requests(abm)
    resync = sync(warehouse, list_id, "run_3", full_resync=True)
    assert (resync["to_add"], resync["added"], resync["duplicates"]) == (10, 3, 7)
    assert sorted(sent_ids(abm)) == [account_id(n) for n in range(10)]
    assert member_ids(abm, list_id) == {account_id(n) for n in range(10)}
    assert state_ids(warehouse, list_id) == member_ids(abm, list_id)


def test_remove_only_only_removes(abm: Any, warehouse: Warehouse) -> None:
    list_id = start_with(abm, warehouse, range(10))
    warehouse.replace_table("targets", COLUMNS, rows_for([*range(2, 10), 20, 21]))
    result = sync(warehouse, list_id, "run_2", mode="remove_only")
    assert (result["to_add"], result["removed"]) == (0, 2)
    assert membership_requests(abm)["add"] == 0
    assert sorted(sent_ids(abm, "remove")) == [account_id(0), account_id(1)]
    assert member_ids(abm, list_id) == {account_id(n) for n in range(2, 10)}
