"""Keep a three-tier ABM programme in step with the warehouse's account-tiers table.

The model table (``abm_account_tiers``: one row per account and tier it qualifies for) names each
account's tier; ``AccountAudienceSyncOperator`` keeps one list per tier, each account on the list of
its highest tier only, and the current customers (``abm_customers``) on none. Each run sends only the
change, every removal before any addition: an account promoted from Tier 2 to Tier 1 leaves Tier 2
before it joins Tier 1, so it is never on two lists. The lists are created in the folder on the first
run. Runs when the tiers table's Asset is updated, and daily.

A run that would remove more than a quarter of the programme's members or of one list's, or that
finds a tier emptied, stops before sending anything on any list and says why. If the change is meant,
trigger the DAG with ``max_removals`` set to ``null`` (a re-tiering), and ``allow_empty_source`` set to
``true`` as well for a tier that is meant to be empty; ``dry_run`` previews the moves.

The connections and the table, folder and list names come from the environment (``ABM_*``
variables), so the same file runs on the embedded defaults (emulator + DuckDB) and elsewhere.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from abm_provider.assets import warehouse_asset
from abm_provider.compat import AssetOrTimeSchedule, CronTriggerTimetable  # in airflow.sdk from 3.2
from abm_provider.operators.account_lists import (
    AccountAudienceSyncOperator,
    CreateAccountListFolderOperator,
)

ABM_CONN_ID = os.environ.get("ABM_CONN_ID", "abm_default")
WAREHOUSE_CONN_ID = os.environ.get("ABM_WAREHOUSE_CONN_ID", "abm_warehouse")
# Task retries for transient failures; the demo and the tests set 0 so a failure shows at once.
RETRIES = int(os.environ.get("ABM_TASK_RETRIES", "2"))
TIERS_TABLE = os.environ.get("ABM_ACCOUNT_TIERS_TABLE", "abm_account_tiers")
CUSTOMERS_TABLE = os.environ.get("ABM_CUSTOMERS_TABLE", "abm_customers")
FOLDER_NAME = os.environ.get("ABM_PROGRAMME_FOLDER", "ABM programme")

with DAG(
    dag_id="abm_sync_audiences",
    description="One list per ABM tier, each account on its highest tier, customers on none.",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("30 6 * * *", timezone="UTC"),
        assets=[warehouse_asset(WAREHOUSE_CONN_ID, TIERS_TABLE)],
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={
        "dry_run": Param(False, type="boolean"),
        "max_removals": Param(0.25, type=["null", "number"], minimum=0),
        "allow_empty_source": Param(False, type="boolean"),
        "full_resync": Param(False, type="boolean"),
    },
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=2)},
    tags=["abm", "account-lists", "audiences"],
    doc_md=__doc__,
) as dag:
    ensure_folder = CreateAccountListFolderOperator(
        task_id="ensure_folder", abm_conn_id=ABM_CONN_ID, folder_name=FOLDER_NAME
    )
    AccountAudienceSyncOperator(
        task_id="sync_audiences",
        abm_conn_id=ABM_CONN_ID,
        table=TIERS_TABLE,
        sql_conn_id=WAREHOUSE_CONN_ID,
        audience_column="tier",
        # Highest priority first: an account in several tiers goes to the first of them.
        audiences={
            "tier_1": {"list_name": "ABM Tier 1 (one-to-one)"},
            "tier_2": {"list_name": "ABM Tier 2 (one-to-few)"},
            "tier_3": {"list_name": "ABM Tier 3 (one-to-many)"},
        },
        folder_id=ensure_folder.output["folder_id"],
        exclusions=[{"table": CUSTOMERS_TABLE, "id_column": "account_id"}],
        column_map={"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"},
        dry_run="{{ params.dry_run }}",
        max_removals="{{ params.max_removals }}",
        allow_empty_source="{{ params.allow_empty_source }}",
        full_resync="{{ params.full_resync }}",
        # Bad rows and unknown accounts are recorded with their reasons; they do not hold back the rest.
        max_rejected=None,
    )
