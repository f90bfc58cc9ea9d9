"""``abm_sync_audiences`` end to end with ``dag.test()``: a warehouse tiers table -> three emulator lists.

What each list holds is read back through the emulator's admin API; the moves through the task's XCom.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagtest_support import Warehouse, load_dag, task_states, xcom

ORG = "00D000000000001"
TIERS = ("tier_1", "tier_2", "tier_3")


def valid_id(n: int) -> str:
    return f"001{n:015d}"


def seed(warehouse: Warehouse, tiers: dict[str, list[int]], customers: list[int]) -> None:
    rows = [(valid_id(n), f"Account {n}", ORG, tier) for tier, numbers in tiers.items() for n in numbers]
    warehouse.replace_table("abm_account_tiers", ["account_id", "account_name", "crm_org_id", "tier"], rows)
    warehouse.replace_table("abm_customers", ["account_id"], [(valid_id(n),) for n in customers])


def run_dag(**conf: Any) -> Any:
    dag_run = load_dag("abm_sync_audiences.py").test(run_conf=conf or None)
    assert str(dag_run.state) == "success", f"DAG run failed: {task_states(dag_run)}"
    return dag_run


def on_lists(emulator: Any, summary: dict[str, Any]) -> dict[str, set[str]]:
    return {e["audience"]: {m["id"] for m in emulator.members(e["list_id"])} for e in summary["lists"]}


@pytest.mark.timeout(300)
def test_audience_dag_tiers_excludes_and_moves_with_each_account_on_one_list(
    dag_env: Path, emulator: Any, warehouse: Warehouse
) -> None:
    # Account 11 qualifies for tiers 1 and 2 (it goes to tier 1); 99 is a customer.
    first_tiers = {"tier_1": [*range(1, 12)], "tier_2": [*range(11, 31)], "tier_3": [*range(31, 61), 99]}
    seed(warehouse, first_tiers, [99])
    summary = xcom(run_dag(), "sync_audiences")
    assert on_lists(emulator, summary) == {
        "tier_1": {valid_id(n) for n in range(1, 12)},
        "tier_2": {valid_id(n) for n in range(12, 31)},
        "tier_3": {valid_id(n) for n in range(31, 61)},
    }
    names = {f"{lst['name']}" for a in emulator.state()["accounts"].values() for lst in a["lists"]}
    assert {"ABM Tier 1 (one-to-one)", "ABM Tier 2 (one-to-few)", "ABM Tier 3 (one-to-many)"} <= names

    # 12 promoted to tier 1, 2 demoted to tier 3, 35 became a customer.
    second_tiers = {
        "tier_1": [1, *range(3, 13)],
        "tier_2": [*range(11, 31)],
        "tier_3": [2, *range(31, 61), 99],
    }
    seed(warehouse, second_tiers, [35, 99])
    preview = xcom(run_dag(dry_run=True), "sync_audiences")
    assert preview["dry_run"] is True
    assert on_lists(emulator, preview) == on_lists(emulator, summary), "a dry run sent something"
    second = xcom(run_dag(), "sync_audiences")
    assert [e["list_id"] for e in second["lists"]] == [e["list_id"] for e in summary["lists"]]
    assert {(m["from"], m["to"]): m["accounts"] for m in second["moves"]} == {
        ("tier_1", "tier_3"): 1,
        ("tier_2", "tier_1"): 1,
    }
    assert on_lists(emulator, second) == {
        "tier_1": {valid_id(n) for n in (1, *range(3, 13))},
        "tier_2": {valid_id(n) for n in range(13, 31)},
        "tier_3": {valid_id(n) for n in (2, *range(31, 61)) if n != 35},
    }
    assert second["totals"]["excluded"] == 2  # 35 removed from tier 3, 99 kept off it
