"""``abm_provider.accounts.sync.sending``: what a run's requests carry, removals first, by whole syncs
against the emulator with the state on DuckDB, PostgreSQL and MariaDB.

Accounts given by id alone are sent with the org the service fills in and stay in step on the next run;
a key that moves from no org to its org stays on the list. A state database that gives back fewer
plan rows than the run holds stops the run with nothing of them sent or recorded, and the rerun
resumes.
"""

from __future__ import annotations

from typing import Any

import pytest
from sync_support import (
    COLUMNS,
    account_id,
    clear_requests,
    make_list,
    member_ids,
    rows_for,
    sent_ids,
    state_ids,
    sync,
)

from abm_provider.accounts.sync import sending
from abm_provider.accounts.sync.statements.binding import text
from abm_provider.exceptions import PlanRowsMissing
from support.warehouses import Warehouse


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


def test_plan_rows_the_database_does_not_give_back_are_neither_sent_nor_recorded(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group read that comes back short (a database that hides or lost committed rows) stops the
    run before any of its rows is sent: the groups before it stay recorded, the run's progress stops
    there, and the rerun resumes from the plan. Before, the range was recorded as sent and the run
    ended as if whole, with accounts never sent."""
    monkeypatch.setattr(sending, "RECORD_ACCOUNTS", 4)  # groups of 2 batches of 2: rows 1-4, 5-8, 9-10
    reads: list[int] = []
    plan_rows = sending.statements.plan_rows

    def short_second_read(*args: Any) -> Any:
        reads.append(args[4])
        return plan_rows(*args) + (text(" LIMIT 3") if len(reads) == 2 else text(""))

    monkeypatch.setattr(sending.statements, "plan_rows", short_second_read)
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(10)))
    with pytest.raises(PlanRowsMissing, match=r"add rows 5 to 8 \(4\).* gave back 3 of them"):
        sync(warehouse, list_id, "run_1", batch_size=2)
    first_four = {account_id(n) for n in range(4)}
    assert set(sent_ids(abm)) == first_four
    assert member_ids(abm, list_id) == first_four
    assert state_ids(warehouse, list_id) == first_four

    monkeypatch.setattr(sending.statements, "plan_rows", plan_rows)
    clear_requests(abm)
    again = sync(warehouse, list_id, "run_1", batch_size=2)
    assert again["added"] == 10
    assert sorted(sent_ids(abm)) == sorted(account_id(n) for n in range(4, 10))
    assert member_ids(abm, list_id) == {account_id(n) for n in range(10)}
