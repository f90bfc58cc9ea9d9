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
NO_ORG = "001000000000000777"  # no crm_org_id: sent by id alone, the service fills in its org


def valid_id(n: int) -> str:
    return f"001{n:015d}"


def seed(warehouse: Warehouse, rows: list[tuple[str, str, str | None]]) -> None:
    warehouse.replace_table("abm_target_accounts", ["account_id", "account_name", "crm_org_id"], rows)


def run_dag() -> Any:
    dag_run = load_dag("abm_sync_account_lists.py").test()
    assert str(dag_run.state) == "success", f"DAG run failed: {task_states(dag_run)}"
    return dag_run


def members(emulator: Any, list_id: str) -> set[str]:
    found = emulator.members(list_id)
    orgs = {m["id"]: m["crmOrgId"] for m in found}
    assert all(org == (emulator.crm_org_id() if i == NO_ORG else ORG) for i, org in orgs.items()), orgs
    return set(orgs)


def membership(warehouse: Warehouse, list_id: str) -> list[str]:
    rows = warehouse.query(
        "SELECT account_id FROM abm_sync_members WHERE list_id = %s ORDER BY account_id", [list_id]
    )
    return [r[0] for r in rows]


def rejects(warehouse: Warehouse) -> list[tuple[str, str, str]]:
    rows = warehouse.query("SELECT account_id, action, reason FROM abm_sync_rejects ORDER BY account_id")
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

    # Run 1: everything valid is added (the row without an org too); the rest is recorded with its reason.
    first = run_dag()
    list_id = xcom(first, "ensure_list")["listId"]
    assert members(emulator, list_id) == targets | {NO_ORG}
    assert membership(warehouse, list_id) == sorted(targets | {NO_ORG})
    recorded = rejects(warehouse)
    assert [(r[0], r[1]) for r in recorded] == [(WHITESPACE, "invalid"), (NOT_FOUND, "add")]
    reasons = {r[0]: r[2] for r in recorded}
    assert reasons[NOT_FOUND].startswith("not found")
    assert "whitespace" in reasons[WHITESPACE]
    summary = xcom(first, "sync_list")
    assert {k: summary[k] for k in ("added", "duplicates", "not_found", "rejected", "removed")} == {
        "added": len(targets) + 1,
        "duplicates": 0,
        "not_found": 1,
        "rejected": 1,
        "removed": 0,
    }
    assert summary["dry_run"] is False

    # Run 2: three accounts left the target set, two joined, one that joined was already on the list
    # (put there by someone else), and the row without an org got one: only that change is sent; the
    # refused rows are unchanged, so they are not sent again.
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
    summary = xcom(second, "sync_list")
    assert (summary["to_add"], summary["added"], summary["duplicates"]) == (4, 3, 1)
    assert (summary["to_remove"], summary["removed"]) == (4, 4)  # the leavers and NO_ORG's old key
    assert (summary["not_found"], summary["rejected"], summary["held"]) == (0, 0, 2)
    found = emulator.members(list_id)
    assert {m["id"] for m in found} == targets and {m["crmOrgId"] for m in found} == {ORG}
    assert membership(warehouse, list_id) == sorted(targets)
    assert rejects(warehouse) == recorded, "earlier rejects were sent again or recorded twice"

    # Run 3: nothing changed, so nothing is sent.
    third = xcom(run_dag(), "sync_list")
    assert (third["to_add"], third["to_remove"], third["added"], third["removed"]) == (0, 0, 0, 0)
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
    from abm_provider.accounts.sync import engine

    targets = {valid_id(n) for n in range(1, 6)}
    seed(warehouse, [(i, f"Account {i}", ORG) for i in sorted(targets)])
    late = valid_id(500)
    original = engine.ListSync._send_run

    def edit_then_send(self: Any, run: Any) -> None:
        # Through the sync's own connection: DuckDB allows one configuration per file in a process.
        self.db.execute(f"INSERT INTO abm_target_accounts VALUES ({self.db.marks(3)})", [late, "Late", ORG])
        self.db.conn.commit()
        original(self, run)

    monkeypatch.setattr(engine.ListSync, "_send_run", edit_then_send)
    first = run_dag()
    list_id = xcom(first, "ensure_list")["listId"]
    assert members(emulator, list_id) == targets
    assert membership(warehouse, list_id) == sorted(targets), "recorded an account that was not sent"

    monkeypatch.setattr(engine.ListSync, "_send_run", original)
    second = run_dag()
    assert xcom(second, "sync_list")["added"] == 1
    assert members(emulator, list_id) == targets | {late}
    assert membership(warehouse, list_id) == sorted(targets | {late})


@pytest.mark.timeout(300)
def test_sync_dag_dry_run_param_previews_without_sending(
    dag_env: Path, emulator: Any, warehouse: Warehouse
) -> None:
    seed(warehouse, [(valid_id(n), f"Account {n}", ORG) for n in range(1, 4)])
    dag_run = load_dag("abm_sync_account_lists.py").test(run_conf={"dry_run": True})
    assert str(dag_run.state) == "success", task_states(dag_run)
    summary = xcom(dag_run, "sync_list")
    assert (summary["dry_run"], summary["to_add"], summary["added"]) == (True, 3, 0)
    assert members(emulator, xcom(dag_run, "ensure_list")["listId"]) == set()
