"""On each completed execution: make sure the export job exists, load what is not loaded, check the table.

Scheduled on the export's Asset, whose watcher (in the triggerer) fires once per execution that
completes: no sensor waits for a day's execution, so a manual run, a late start or
``airflow dags test`` loads what has completed instead of waiting for tomorrow's. Airflow may fold
several events into one run, so the load takes every completed execution its ledger lacks, oldest
first, each committed as it loads; an event the triggerer lost is picked up by the next run. The
daily DAG (abm_export_to_warehouse.py) stays for deployments without a triggerer to spare;
docs/warehouse-loading.md says when to use which.

Every name below can be changed through the environment without editing this file, so the same DAG
runs on the embedded defaults (emulator + DuckDB) and against the real service and PostgreSQL.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from abm_provider.assets import export_asset
from abm_provider.operators.exports import CreateExportJobOperator
from abm_provider.transfers.csv_to_sql import UNLOADED, ExecutionCsvToSqlOperator
from abm_provider.transfers.table_checks import export_table_checks

ABM_CONN_ID = os.environ.get("ABM_CONN_ID", "abm_default")
WAREHOUSE_CONN_ID = os.environ.get("ABM_WAREHOUSE_CONN_ID", "abm_warehouse")
# Task retries for transient failures; the demo and the tests set 0 so a failure shows at once.
RETRIES = int(os.environ.get("ABM_TASK_RETRIES", "2"))
EXPORT_TYPE = os.environ.get("ABM_EXPORT_TYPE", "TACTIC_PERFORMANCE")
EXPORT_SCHEDULE = os.environ.get("ABM_EXPORT_SCHEDULE", "0 5 * * *")
# Seconds between the watcher's looks at the executions; the demo and tests use a fast clock.
POLL_INTERVAL = float(os.environ.get("ABM_POKE_INTERVAL", "60"))
TABLE = os.environ.get("ABM_EXPORT_TABLE", "abm_tactic_performance")
# The most executions one run loads; the rest wait for the next run.
MAX_EXECUTIONS = int(os.environ.get("ABM_MAX_EXECUTIONS", "10"))

with DAG(
    dag_id="abm_export_on_event",
    description="Load each completed ABM export execution into the warehouse as it completes.",
    schedule=[export_asset(EXPORT_TYPE, abm_conn_id=ABM_CONN_ID, poll_interval=POLL_INTERVAL)],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=2)},
    tags=["abm", "warehouse"],
    doc_md=__doc__,
) as dag:
    ensure_export_job = CreateExportJobOperator(
        task_id="ensure_export_job",
        abm_conn_id=ABM_CONN_ID,
        export_type=EXPORT_TYPE,
        schedule=EXPORT_SCHEDULE,
        if_exists="ignore",
    )

    load_unloaded = ExecutionCsvToSqlOperator(
        task_id="load_unloaded",
        source=UNLOADED,
        abm_conn_id=ABM_CONN_ID,
        sql_conn_id=WAREHOUSE_CONN_ID,
        table=TABLE,
        export_type=EXPORT_TYPE,
        max_executions=MAX_EXECUTIONS,
    )

    checks = export_table_checks(WAREHOUSE_CONN_ID, TABLE, EXPORT_TYPE)

    ensure_export_job >> load_unloaded >> checks
