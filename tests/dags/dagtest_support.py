"""Helpers for the DAG tests: the tables they reset, DAG loading and XCom reading.

A module of its own (not ``conftest``) so test files import it by a name no other test folder uses.
The warehouses are ``support.warehouses``'s (the ``DAGS`` suite's database on PostgreSQL).
"""

from __future__ import annotations

from typing import Any

from smoke.smoke_support import load_dag, task_states
from support.warehouses import Warehouse

__all__ = ["TABLES", "Warehouse", "load_dag", "task_states", "xcom"]

#: Every table the two DAGs and the loader create, dropped before each PostgreSQL test.
TABLES = (
    "abm_tactic_performance",
    "abm_load_ledger",
    "abm_target_accounts",
    "abm_sync_members",
    "abm_sync_plan",
    "abm_sync_rejects",
    "abm_sync_runs",
)


def xcom(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    """A task's XCom from the metadata database, deserialised as a downstream task would see it."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        found = session.scalars(
            XComModel.get_many(run_id=dag_run.run_id, key=key, task_ids=task_id, dag_ids=dag_run.dag_id)
        ).first()
        if found is None:
            raise AssertionError(f"no XCom {key!r} for {task_id} in {dag_run.run_id}")
        return XComModel.deserialize_value(found)
