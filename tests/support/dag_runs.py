"""DAGs a test builds and runs with ``dag.test()``, and what their tasks pushed.

``dag.test()`` on Airflow 3.3 only runs DAGs that are serialized in the metadata database, and it
serializes by parsing the configured DAG bundle: a DAG built inside a test is not in it.
:func:`register_dag` writes the test's DAG to the database as the DAG processor would (the same
function) before it runs. A folder's ``conftest`` imports the ``run_dag`` fixture from here by name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def register_dag(dag: Any) -> None:
    """Serialize ``dag`` into the metadata database, as the DAG processor does for files in a bundle."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()
    with create_session() as session:
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session=session
        )


def xcom(ti: Any) -> Any:
    """The return value a finished task pushed."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, key="return_value")
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[[Any], dict[str, Any]]:
    """Run a DAG with ``dag.test()``; return ``{task_id: task instance}`` of the run."""

    def run(dag: Any) -> dict[str, Any]:
        register_dag(dag)
        dag_run = dag.test()
        return {ti.task_id: ti for ti in dag_run.get_task_instances()}

    return run
