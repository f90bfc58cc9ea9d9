"""Keep an ABM account list in step with the warehouse's target-accounts table.

Runs when the target-accounts Asset is updated, and daily. Each run sends only the change: accounts
that joined the target set are added and, with the ``mirror`` param (default on), accounts that left
it are removed. ``AccountListSyncOperator`` keeps what the list holds, each run's plan and the
refused rows (with their reasons) and a run log in ``abm_sync_*`` tables of the warehouse. Set
``dry_run`` to preview the plan without sending anything.

A run that would remove more than a quarter of the list, or that reads an empty table, stops before
sending anything and says why. If the change is meant, trigger the DAG with the ``max_removals``
param set to ``null`` (or a larger limit), or ``allow_empty_source`` on. ``full_resync`` sends the
whole table again, for a list edited by hand.

The connections, the target table and the folder and list names come from the environment
(``ABM_*`` variables), so the same file runs on the embedded defaults (emulator + DuckDB) and on
PostgreSQL and the real service.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from abm_provider.assets import warehouse_asset
from abm_provider.compat import AssetOrTimeSchedule, CronTriggerTimetable  # in airflow.sdk from 3.2
from abm_provider.operators.account_lists import (
    AccountListSyncOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
)

ABM_CONN_ID = os.environ.get("ABM_CONN_ID", "abm_default")
WAREHOUSE_CONN_ID = os.environ.get("ABM_WAREHOUSE_CONN_ID", "abm_warehouse")
# Task retries for transient failures; the demo and the tests set 0 so a failure shows at once.
RETRIES = int(os.environ.get("ABM_TASK_RETRIES", "2"))
TARGET_TABLE = os.environ.get("ABM_TARGET_ACCOUNTS_TABLE", "abm_target_accounts")
FOLDER_NAME = os.environ.get("ABM_LIST_FOLDER", "Warehouse sync")
LIST_NAME = os.environ.get("ABM_LIST_NAME", "Target accounts")
MIRROR = os.environ.get("ABM_LIST_MIRROR", "true").lower() == "true"

with DAG(
    dag_id="abm_sync_account_lists",
    description="Add new target accounts to the ABM list and remove those that left the target set.",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 6 * * *", timezone="UTC"),
        assets=[warehouse_asset(WAREHOUSE_CONN_ID, TARGET_TABLE)],
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={
        "mirror": Param(MIRROR, type="boolean"),
        "dry_run": Param(False, type="boolean"),
        "max_removals": Param(0.25, type=["null", "number"], minimum=0),
        "allow_empty_source": Param(False, type="boolean"),
        "full_resync": Param(False, type="boolean"),
    },
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=2)},
    tags=["abm", "account-lists"],
    doc_md=__doc__,
) as dag:
    ensure_folder = CreateAccountListFolderOperator(
        task_id="ensure_folder", abm_conn_id=ABM_CONN_ID, folder_name=FOLDER_NAME
    )
    ensure_list = CreateAccountListOperator(
        task_id="ensure_list",
        abm_conn_id=ABM_CONN_ID,
        list_name=LIST_NAME,
        folder_id=ensure_folder.output["folder_id"],
    )
    sync = AccountListSyncOperator(
        task_id="sync_list",
        abm_conn_id=ABM_CONN_ID,
        list_id=ensure_list.output["list_id"],
        sql=f"SELECT account_id, account_name, crm_org_id FROM {TARGET_TABLE}",
        sql_conn_id=WAREHOUSE_CONN_ID,
        column_map={"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"},
        mode="{{ 'mirror' if params.mirror else 'add_only' }}",
        dry_run="{{ params.dry_run }}",
        max_removals="{{ params.max_removals }}",
        allow_empty_source="{{ params.allow_empty_source }}",
        full_resync="{{ params.full_resync }}",
        # Bad rows and unknown accounts are recorded with their reasons (unknown ones are sent again
        # a day later); they do not hold back the thousands of good ones.
        max_rejected=None,
    )
