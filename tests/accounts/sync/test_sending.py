"""``abm_provider.accounts.sync.sending``: what a run's requests carry, removals first, by whole syncs
against the emulator with the state on DuckDB, PostgreSQL and MariaDB.

Accounts given by id alone are sent with the org the service fills in and stay in step on the next run;
a key that moves from no org to its org stays on the list.
"""

from __future__ import annotations

from typing import Any

from sync_support import (
    COLUMNS,
    account_id,
    clear_requests,
    make_list,
    member_ids,
    sync,
)

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
