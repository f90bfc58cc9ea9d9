"""``abm_export_on_event`` with ``dag.test()``: a run loads every completed execution not loaded yet.

A run of the Asset-scheduled DAG (here started by hand, as ``airflow dags test`` would) does not wait
for an execution: it loads those that completed and are not in the ledger, oldest first. The
expectation is computed from the downloaded files with Python's ``csv`` module, as for the daily DAG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagtest_support import Warehouse, load_dag, task_states, xcom
from test_export_to_warehouse_dag import CHECKS, EXPORT_TYPE, file_rows, ledger, table_rows


def run_dag() -> Any:
    dag_run = load_dag("abm_export_on_event.py").test()
    states = task_states(dag_run)
    assert str(dag_run.state) == "success", f"DAG run failed: {states}"
    assert all(states[c] == "success" for c in CHECKS), states
    return dag_run


@pytest.mark.timeout(300)
def test_a_run_loads_the_executions_not_loaded_oldest_first_then_nothing(
    dag_env: Path, emulator: Any, warehouse: Warehouse
) -> None:
    from abm_provider.hooks.abm import AbmHook

    # A yearly schedule: the service fires nothing on its own while the test moves its clock a day.
    AbmHook("abm_default").create_export_job(EXPORT_TYPE, "0 5 1 1 *")
    first = emulator.fire(EXPORT_TYPE, outcome="COMPLETE")
    emulator.advance(24 * 3600)  # a day later: the next execution restates the last 48 hours
    second = emulator.fire(EXPORT_TYPE, outcome="COMPLETE")

    run = run_dag()
    loads = xcom(run, "load_unloaded")["executions"]
    assert [load["execution_id"] for load in loads] == [first["id"], second["id"]]
    older, newer = (file_rows(load["archive"]) for load in loads)
    assert newer.keys() & older.keys(), "the second execution restates nothing: the order would not matter"
    expected = {**older, **newer}
    assert table_rows(warehouse) == expected
    assert [row[0] for row in ledger(warehouse)] == [first["id"], second["id"]]

    # Nothing completed since: the next run loads nothing, and the table stays as it is.
    again = xcom(run_dag(), "load_unloaded")
    assert (again["executions"], again["left"]) == ([], 0)
    assert table_rows(warehouse) == expected
