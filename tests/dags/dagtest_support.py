"""Helpers for the DAG tests: the tables they reset, DAG loading and XCom reading.

A module of its own (not ``conftest``) so test files import it by a name no other test folder uses.
The warehouses are ``support.warehouses``'s (the ``DAGS`` suite's database on PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import closing
from typing import Any

from smoke.smoke_support import load_dag, task_states
from support.cloud_warehouses import BigQueryTarget, SnowflakeTarget
from support.warehouses import Warehouse

__all__ = [
    "TABLES",
    "BigQueryWarehouse",
    "SnowflakeWarehouse",
    "Warehouse",
    "load_dag",
    "task_states",
    "xcom",
]

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


class SnowflakeWarehouse:
    """The test's database on fakesnow, as the DAG tests ask a :class:`Warehouse`: its connection and
    its rows, read with the Snowflake connector (never the code under test)."""

    kind = "snowflake"

    def __init__(self, target: SnowflakeTarget) -> None:
        self.target = target

    @property
    def conn_env(self) -> str:
        return json.dumps(self.target.server.connection(self.target.database))

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        from airflow.providers.snowflake.hooks.snowflake import SnowflakeHook

        with closing(SnowflakeHook(snowflake_conn_id=self.target.conn_id).get_conn()) as conn:
            cur = conn.cursor()
            cur.execute(sql, params)
            return [tuple(row) for row in cur.fetchall()]


class BigQueryWarehouse:
    """The test's dataset on bqemulator (created here), as the DAG tests ask a :class:`Warehouse`: its
    connection, and its rows read with ``google-cloud-bigquery``'s client, unqualified names resolved in
    the dataset. BigQuery names a table with its dataset: :attr:`table` is what the DAG loads into."""

    kind = "bigquery"

    def __init__(self, target: BigQueryTarget) -> None:
        self.target = target
        self.client = target.client()
        self.client.create_dataset(target.dataset)

    @property
    def conn_env(self) -> str:
        return json.dumps(self.target.server.connection())

    def table(self, name: str) -> str:
        return f"{self.target.dataset}.{name}"

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        from google.cloud import bigquery

        if params:
            raise ValueError("the DAG tests' BigQuery reads take no parameters")
        config = bigquery.QueryJobConfig(default_dataset=f"{self.client.project}.{self.target.dataset}")
        return [tuple(row.values()) for row in self.client.query(sql, job_config=config).result()]


#: Where the export DAG's test loads: the DuckDB and PostgreSQL warehouses, and the two emulators.
ExportWarehouse = Warehouse | SnowflakeWarehouse | BigQueryWarehouse
