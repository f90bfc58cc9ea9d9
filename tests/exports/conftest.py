"""Fixtures for the export tests: `dag.test()` runs (`abm` and `context` are in `tests/conftest.py`).

`dag.test()` on Airflow 3.3 only runs DAGs that are serialized in the metadata database, and it
serializes by parsing the configured DAG bundle; a DAG built inside a test is not in it. `run_dag`
writes the test's DAG to the database as the DAG processor would (same function) before running it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from export_helpers import register_dag


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[[Any], dict[str, Any]]:
    """Run a DAG with `dag.test()`; return `{task_id: task instance}` of the run."""

    def run(dag: Any) -> dict[str, Any]:
        register_dag(dag)
        dag_run = dag.test()
        return {ti.task_id: ti for ti in dag_run.get_task_instances()}

    return run
