"""``abm_sync_account_lists`` end to end with ``dag.test()``: warehouse target set -> emulator list.

The list's members are read back through the emulator's admin API, not through the DAG's own
bookkeeping, and each later run is checked to send only the change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagtest_support import Warehouse, load_dag, task_states, xcom

ORG = "00D000000000001"
NOT_FOUND = "002000000000000099"  # well formed, but not an account id: the service reports it not found
WHITESPACE = "001 has spaces"  # refused by the validator before anything is sent
NO_ORG = "001000000000000777"  # no crm_org_id: refused as "missing crmOrgId"


def valid_id(n: int) -> str:
    return f"001{n:015d}"


def seed(warehouse: Warehouse, rows: list[tuple[str, str, str | None]]) -> None:
    warehouse.execute("DROP TABLE IF EXISTS abm_target_accounts")
    warehouse.execute(
        "CREATE TABLE abm_target_accounts (account_id VARCHAR, account_name VARCHAR, crm_org_id VARCHAR)"
    )
    warehouse.execute("INSERT INTO abm_target_accounts VALUES (%s, %s, %s)", rows)


def run_dag() -> Any:
    dag_run = load_dag("abm_sync_account_lists.py").test()
    assert str(dag_run.state) == "success", f"DAG run failed: {task_states(dag_run)}"
    return dag_run


def members(emulator: Any, list_id: str) -> set[str]:
    found = emulator.members(list_id)
    assert all(m["crmOrgId"] == ORG for m in found), found
    return {m["id"] for m in found}


def membership(warehouse: Warehouse, list_id: str) -> list[str]:
    rows = warehouse.query(
        "SELECT account_id FROM abm_list_membership WHERE list_id = %s ORDER BY account_id", [list_id]
    )
    return [r[0] for r in rows]


def rejects(warehouse: Warehouse) -> list[tuple[str, str, str]]:
    rows = warehouse.query("SELECT account_id, action, reason FROM abm_list_rejects ORDER BY account_id")
    return [(r[0], r[1], r[2]) for r in rows]


@pytest.mark.timeout(300)
def test_sync_dag_adds_records_rejects_and_then_sends_only_the_change(
    dag_env: Path, emulator: Any, warehouse: Warehouse
) -> None:
    from abm_provider.hooks.abm import AbmHook

    targets = {valid_id(n) for n in range(1, 31)}
    seed(
        warehouse,
        [(i, f"Account {i}, Ltd. é", ORG) for i in sorted(targets)]
        + [
            (NOT_FOUND, "Not an account", ORG),
            (WHITESPACE, "Bad id", ORG),
            (NO_ORG, f"Account {NO_ORG}, Ltd. é", None),
        ],
    )

    # Run 1: everything valid is added; the rest is recorded with its reason.
    first = run_dag()
    list_id = xcom(first, "ensure_list")["listId"]
    assert members(emulator, list_id) == targets
    assert membership(warehouse, list_id) == sorted(targets)
    recorded = rejects(warehouse)
    assert [(r[0], r[1]) for r in recorded] == [(WHITESPACE, "add"), (NO_ORG, "add"), (NOT_FOUND, "add")]
    reasons = {r[0]: r[2] for r in recorded}
    assert reasons[NOT_FOUND].startswith("not found")
    assert "whitespace" in reasons[WHITESPACE]
    assert "missing crmOrgId" in reasons[NO_ORG]
    assert xcom(first, "record_changes") == {
        "added": len(targets),
        "duplicates": 0,
        "not_found": 1,
        "rejected": 2,
        "removed": 0,
    }

    # Run 2: three accounts left the target set, two joined, one that joined was already on the list
    # (put there by someone else), and the row without an org was corrected: only those seven are
    # read and sent; the other refused rows are unchanged, so they are not sent again.
    leavers = {valid_id(n) for n in (1, 2, 3)}
    joiners = {valid_id(n) for n in (101, 102)}
    already = valid_id(200)
    AbmHook("abm_default").add_accounts(list_id, [{"id": already, "crmOrgId": ORG, "crmType": "SALESFORCE"}])
    targets = (targets - leavers) | joiners | {already, NO_ORG}
    seed(
        warehouse,
        [(i, f"Account {i}, Ltd. é", ORG) for i in sorted(targets)]
        + [(NOT_FOUND, "Not an account", ORG), (WHITESPACE, "Bad id", ORG)],
    )
    second = run_dag()
    assert xcom(second, "ensure_list")["listId"] == list_id, "the list was not reused"
    added = xcom(second, "add_new_accounts")
    assert (added["rows"], added["sent"], added["added"], added["duplicates"]) == (4, 4, 3, 1)
    removed = xcom(second, "remove_departed_accounts")
    assert (removed["rows"], removed["sent"], removed["removed"]) == (3, 3, 3)
    assert members(emulator, list_id) == targets
    assert membership(warehouse, list_id) == sorted(targets)
    assert rejects(warehouse) == recorded, "earlier rejects were sent again or recorded twice"

    # Run 3: nothing changed, so nothing is sent.
    third = run_dag()
    assert xcom(third, "add_new_accounts")["sent"] == 0
    assert xcom(third, "remove_departed_accounts")["sent"] == 0
    assert members(emulator, list_id) == targets
    assert membership(warehouse, list_id) == sorted(targets)
    folders = [f for a in emulator.state()["accounts"].values() for f in a["folders"]]
    assert len(folders) == 1, f"re-runs created folders: {folders}"


@pytest.mark.timeout(300)
def test_sync_dag_records_only_what_it_sent_when_the_target_changes_mid_run(
    dag_env: Path, emulator: Any, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An account that joins the target set while a run is under way is sent by the next run.

    Recording membership by re-reading the target table at the end of the run would mark it as on
    the list although it was never sent, and no later run would ever send it.
    """
    from abm_provider.operators.account_lists import AddAccountsToListOperator

    targets = {valid_id(n) for n in range(1, 6)}
    seed(warehouse, [(i, f"Account {i}", ORG) for i in sorted(targets)])
    late = valid_id(500)
    original_execute = AddAccountsToListOperator.execute

    def execute_then_edit(self: AddAccountsToListOperator, context: Any) -> Any:
        result = original_execute(self, context)
        warehouse.execute("INSERT INTO abm_target_accounts VALUES (%s, %s, %s)", [(late, "Late", ORG)])
        return result

    monkeypatch.setattr(AddAccountsToListOperator, "execute", execute_then_edit)
    first = run_dag()
    list_id = xcom(first, "ensure_list")["listId"]
    assert members(emulator, list_id) == targets
    assert membership(warehouse, list_id) == sorted(targets), "recorded an account that was not sent"

    monkeypatch.setattr(AddAccountsToListOperator, "execute", original_execute)
    second = run_dag()
    assert xcom(second, "add_new_accounts")["sent"] == 1
    assert members(emulator, list_id) == targets | {late}
    assert membership(warehouse, list_id) == sorted(targets | {late})
