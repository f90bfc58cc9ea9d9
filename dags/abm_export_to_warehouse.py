"""Daily: make sure the export job exists, wait for a completed execution, load it while it downloads.

One task downloads the execution and loads it: the warehouse reads the bytes as they arrive, the
file is kept as an archive, and the load commits only once the download is complete and checked. The
two-task form (DownloadExecutionCsvOperator, then ExecutionCsvToSqlOperator on its file) is in
docs/warehouse-loading.md, for those who want the file before the load.

The service restates the most recent 48 hours in every execution, so the load replaces rows by
natural key instead of appending; re-running any day is safe. Every name below can be changed through
the environment without editing this file, so the same DAG runs on the embedded defaults (emulator +
DuckDB) and against the real service and PostgreSQL.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from abm_provider.operators.exports import CreateExportJobOperator
from abm_provider.sensors.exports import ExecutionCompleteSensor
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from abm_provider.transfers.table_checks import export_table_checks

ABM_CONN_ID = os.environ.get("ABM_CONN_ID", "abm_default")
WAREHOUSE_CONN_ID = os.environ.get("ABM_WAREHOUSE_CONN_ID", "abm_warehouse")
# Task retries for transient failures; the demo and the tests set 0 so a failure shows at once.
RETRIES = int(os.environ.get("ABM_TASK_RETRIES", "2"))
EXPORT_TYPE = os.environ.get("ABM_EXPORT_TYPE", "TACTIC_PERFORMANCE")
EXPORT_SCHEDULE = os.environ.get("ABM_EXPORT_SCHEDULE", "0 5 * * *")
# Seconds between looks at the executions while deferred; the demo and tests use a fast clock.
POKE_INTERVAL = float(os.environ.get("ABM_POKE_INTERVAL", "60"))
TABLE = os.environ.get("ABM_EXPORT_TABLE", "abm_tactic_performance")

with DAG(
    dag_id="abm_export_to_warehouse",
    description="Load the ABM export CSV into the warehouse, replacing restated days.",
    schedule="@daily",
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

    wait_for_execution = ExecutionCompleteSensor(
        task_id="wait_for_execution",
        abm_conn_id=ABM_CONN_ID,
        export_type=EXPORT_TYPE,
        # An execution that finished after this interval ended holds the interval's data.
        updated_after="{{ data_interval_end.isoformat() }}",
        deferrable=True,
        poke_interval=POKE_INTERVAL,
        timeout=int(timedelta(hours=20).total_seconds()),
    )

    load_warehouse = ExecutionCsvToSqlOperator(
        task_id="load_warehouse",
        source=wait_for_execution.output,
        abm_conn_id=ABM_CONN_ID,
        sql_conn_id=WAREHOUSE_CONN_ID,
        table=TABLE,
        export_type=EXPORT_TYPE,
    )

    checks = export_table_checks(WAREHOUSE_CONN_ID, TABLE, EXPORT_TYPE)

    ensure_export_job >> wait_for_execution >> load_warehouse
    load_warehouse >> checks
