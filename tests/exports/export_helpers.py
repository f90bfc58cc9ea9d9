"""Helpers shared by the export tests (a module, not conftest, so tests can import it by name)."""

from __future__ import annotations

from typing import Any

EXPORT_TYPE = "TACTIC_PERFORMANCE"


def register_dag(dag: Any) -> None:
    """Serialize `dag` into the metadata database, as the DAG processor does for files in a bundle."""
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
