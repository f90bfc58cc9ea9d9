"""``abm_provider.accounts.sync.plan``: what a run sends, holds or refuses, by whole syncs against the
emulator with the state on DuckDB, PostgreSQL and MariaDB.

A refused row is not sent again until it changes, too many invalid rows send and record nothing, and a
key given twice is added once, with its first row. A first run plans its additions from the stage
itself, with the hash the Python path gives. A run's additions are numbered from 1 in source order.
What reaches the service is read from the emulator's request log and its view of the list; the
warehouse with the database's own driver.
"""

from __future__ import annotations

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
    state_ids,
    sync,
)

from abm_provider.accounts.sync import plan as plan_module
from abm_provider.accounts.sync.row_values import account_hash
from abm_provider.common.rejects import TooManyRejects
from support.warehouses import Warehouse


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


@pytest.mark.parametrize("repeated", [False, True], ids=["each-key-once", "a-key-twice"])
def test_a_first_run_plans_from_the_stage_unless_a_key_repeats(
    abm: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch, repeated: bool
) -> None:
    """A first run adds every valid row, so its additions are planned from the stage, not copied
    into the candidates first (a copy of every source row saved), with the hash the Python path
    gives each row; a key given twice goes through the candidates, which keep its first row."""
    copies: list[str] = []
    copy = plan_module.statements.insert_candidates

    def counted(*args: Any, **kwargs: Any) -> Any:
        copies.append(args[3])
        return copy(*args, **kwargs)

    monkeypatch.setattr(plan_module.statements, "insert_candidates", counted)
    groupings: list[str] = []
    grouping = plan_module.statements.repeated_key

    def asked(rows: str, **kwargs: Any) -> Any:
        groupings.append(rows)
        return grouping(rows, **kwargs)

    monkeypatch.setattr(plan_module.statements, "repeated_key", asked)
    list_id = make_list()
    rows = [*rows_for(range(3)), *([(account_id(1), "Again", ORG)] if repeated else [])]
    warehouse.replace_table("targets", COLUMNS, rows)
    first = sync(warehouse, list_id, "run_1")
    assert (first["to_add"], first["added"]) == (3, 3)
    assert copies == ([list_id] if repeated else [])
    # Whether a key repeats is asked of the stage once; the candidates, every valid row, are not asked.
    assert len(groupings) == 1
    recorded = warehouse.query(
        f"SELECT account_id, account_name, crm_org_id, row_hash FROM {warehouse.name('abm_sync_members')} "
        "WHERE list_id = %s",
        [list_id],
    )
    assert {(i, name) for i, name, _, _ in recorded} == {(account_id(n), f"Account {n}") for n in range(3)}
    for i, name, org, hashed in recorded:
        assert hashed == account_hash({"id": i, "name": name, "crmOrgId": org}), i

    # The list now has members: the next run leaves them out through the candidates, and sends nothing.
    clear_requests(abm)
    second = sync(warehouse, list_id, "run_2")
    assert (second["to_add"], second["to_remove"]) == (0, 0)
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert len(copies) == (2 if repeated else 1)


def test_additions_are_numbered_from_one_in_source_order_on_a_first_run_and_after(
    abm: Any, warehouse: Warehouse
) -> None:
    """The plan's numbers are the order accounts are sent in and a resumed run's place: each run's
    additions are numbered 1, 2, 3... in the order of the source's rows (not of their ids), whether
    planned from the stage (a first run) or from the candidates (members left out). A dry run keeps
    its plan to be read until the next run plans."""
    list_id = make_list()
    plan = warehouse.name("abm_sync_plan")

    def planned(run_id: str) -> list[tuple[int, str]]:
        return warehouse.query(
            f"SELECT seq, account_id FROM {plan} WHERE list_id = %s AND run_id = %s AND action = 'add' "
            "ORDER BY seq",
            [list_id, run_id],
        )

    first = [7, 3, 9, 1, 5]
    warehouse.replace_table("targets", COLUMNS, rows_for(first))
    sync(warehouse, list_id, "run_1", dry_run=True)
    assert planned("run_1") == [(seq, account_id(n)) for seq, n in enumerate(first, start=1)]
    sync(warehouse, list_id, "run_0")
    warehouse.replace_table("targets", COLUMNS, rows_for([4, 7, 12, 3, 10, 11]))
    sync(warehouse, list_id, "run_2", dry_run=True, max_removals=None)
    assert planned("run_2") == [(seq, account_id(n)) for seq, n in enumerate([4, 12, 10, 11], start=1)]
