"""Fixtures for the export tests: the emulator behind the default connection, and `dag.test()` runs.

`dag.test()` on Airflow 3.3 only runs DAGs that are serialized in the metadata database, and it
serializes by parsing the configured DAG bundle; a DAG built inside a test is not in it. `run_dag`
writes the test's DAG to the database as the DAG processor would (same function) before running it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from export_helpers import register_dag


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The emulator reachable as `abm_default`, with task outputs under the test's tmp dir."""
    conn = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path / "state"))
    return emulator


@pytest.fixture
def context() -> dict[str, Any]:
    """The slice of a task context the export operators read when called with `execute()`."""
    ti = SimpleNamespace(dag_id="abm_test", task_id="task", run_id="manual__test", try_number=1, map_index=-1)
    return {"ti": ti, "task_instance": ti, "run_id": "manual__test"}


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[[Any], dict[str, Any]]:
    """Run a DAG with `dag.test()`; return `{task_id: task instance}` of the run."""

    def run(dag: Any) -> dict[str, Any]:
        register_dag(dag)
        dag_run = dag.test()
        return {ti.task_id: ti for ti in dag_run.get_task_instances()}

    return run
