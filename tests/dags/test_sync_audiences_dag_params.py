"""``abm_sync_audiences`` as a user meets it: the demo's two runs print what docs/warehouse-loading.md
shows, the DAG's params let a re-tiering, an emptied tier and a full resync through as its docstring
says, and the moves table counts each move made once. DuckDB only (the demo's warehouse)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from dagtest_support import Warehouse, load_dag, task_states, xcom
from test_sync_audiences_dag import seed

ROOT = Path(__file__).resolve().parents[2]
DUCKDB_ONLY = pytest.mark.parametrize("warehouse", ["duckdb"], indirect=True)


def demo_module() -> Any:
    spec = importlib.util.spec_from_file_location("audiences_demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["audiences_demo"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("audiences_demo", None)
    return module


def run(**conf: Any) -> Any:
    return load_dag("abm_sync_audiences.py").test(run_conf=conf or None)


def ok(**conf: Any) -> Any:
    dag_run = run(**conf)
    assert str(dag_run.state) == "success", f"DAG run failed: {task_states(dag_run)}"
    return dag_run


def demo_lines(results: list[dict[str, Any]]) -> list[str]:
    """What scripts/demo.py's summarize() prints for the audience runs (copied from it)."""
    out = ["Tiered audiences (abm_sync_audiences: three lists, customers excluded):"]
    for number, result in enumerate(results, start=1):
        per_list = ", ".join(
            f"{e['audience']} {e['state_count']} (+{e['added']} -{e['removed']})" for e in result["lists"]
        )
        out.append(f"  run {number}: {per_list}")
        for move in result["moves"]:
            out.append(f"    moved {move['accounts']:>3} accounts from {move['from']} to {move['to']}")
        excluded = {e["audience"]: e["excluded"] for e in result["lists"] if e["excluded"]}
        out.append(f"    excluded (customers removed or kept off): {excluded or 'none'}")
    return out


def documented_demo_lines() -> list[str]:
    page = (ROOT / "docs" / "warehouse-loading.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n(Tiered audiences .*?)```", page, re.S)
    assert block is not None
    return block.group(1).rstrip("\n").split("\n")


@DUCKDB_ONLY
@pytest.mark.timeout(400)
def test_demo_audience_runs_print_what_warehouse_loading_md_shows(
    dag_env: Path, emulator: Any, warehouse: Warehouse
) -> None:
    demo = demo_module()
    first = demo.TIER_SIZES["tier_1"] + demo.TIER_SIZES["tier_2"] + 1
    customers = list(range(first, first + demo.CUSTOMERS))
    demo.seed_programme(Path(warehouse.location), demo.tier_rows(), customers)
    one = xcom(ok(), "sync_audiences")
    demo.seed_programme(Path(warehouse.location), demo.tier_rows(promote=8, demote=5), [*customers, 100, 200])
    two = xcom(ok(), "sync_audiences")
    assert demo_lines([one, two]) == documented_demo_lines()


@DUCKDB_ONLY
@pytest.mark.timeout(400)
def test_params_approve_a_re_tiering_and_an_emptied_tier_and_full_resync_runs(
    dag_env: Path, emulator: Any, warehouse: Warehouse
) -> None:
    tiers = {"tier_1": [*range(1, 9)], "tier_2": [*range(9, 17)], "tier_3": [*range(17, 25)]}
    seed(warehouse, tiers, [])
    ok()
    # Half of tier 2 promoted: more than a quarter of its list, so the default guard stops the run.
    retiered = {"tier_1": [*range(1, 13)], "tier_2": [*range(13, 17)], "tier_3": [*range(17, 25)]}
    seed(warehouse, retiered, [])
    blocked = run()
    assert str(blocked.state) == "failed", task_states(blocked)
    # The DAG docstring: "trigger the DAG with max_removals set to null".
    approved = xcom(ok(max_removals=None), "sync_audiences")
    assert {(m["from"], m["to"]): m["accounts"] for m in approved["moves"]} == {("tier_2", "tier_1"): 4}
    # Tier 3 emptied: allow_empty_source (with max_removals) lets it through.
    seed(warehouse, {"tier_1": [*range(1, 13)], "tier_2": [*range(13, 17)]}, [])
    assert str(run(max_removals=None).state) == "failed"
    emptied = xcom(ok(max_removals=None, allow_empty_source=True), "sync_audiences")
    assert emptied["lists"][2]["state_count"] == 0
    resync = xcom(ok(full_resync=True), "sync_audiences")
    assert [e["state_count"] for e in resync["lists"]] == [12, 4, 0]


@DUCKDB_ONLY
@pytest.mark.timeout(400)
def test_a_preview_s_and_a_stopped_run_s_moves_go_when_a_run_plans(
    dag_env: Path, emulator: Any, warehouse: Warehouse
) -> None:
    """A dry run shows its moves and a run a guard stops keeps them to be read, as their plans are kept;
    the next run that plans forgets them, so the moves table counts each move made once."""
    seed(warehouse, {"tier_1": [*range(1, 9)], "tier_2": [*range(9, 17)], "tier_3": [*range(17, 25)]}, [])
    ok()
    seed(warehouse, {"tier_1": [*range(1, 13)], "tier_2": [*range(13, 17)], "tier_3": [*range(17, 25)]}, [])
    preview = xcom(ok(dry_run=True), "sync_audiences")
    assert {(m["from"], m["to"]): m["accounts"] for m in preview["moves"]} == {("tier_2", "tier_1"): 4}
    blocked = run()
    assert str(blocked.state) == "failed", task_states(blocked)
    approved = xcom(ok(max_removals=None), "sync_audiences")
    assert {(m["from"], m["to"]): m["accounts"] for m in approved["moves"]} == {("tier_2", "tier_1"): 4}
    moved = warehouse.query(
        "SELECT run_id, COUNT(*) FROM abm_sync_moves WHERE kind = 'moved' GROUP BY run_id"
    )
    assert moved == [(approved["run_id"], 4)], f"moves of runs that sent nothing are still counted: {moved}"
