"""Keep an ABM account list in step with the warehouse's target-accounts table.

Runs when the target-accounts Asset is updated, and daily. The warehouse holds what was sent before
(``abm_list_membership``) and what the service or the validator refused (``abm_list_rejects``), so each
run sends only the change: accounts that joined the target set are added, and with the ``mirror``
param (default on) accounts that left it are removed. Every name can be changed through the
environment, so the same file runs on the embedded defaults (emulator + DuckDB) and on PostgreSQL
and the real service.
"""

from __future__ import annotations

import csv
import os
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.common.sql.hooks.sql import DbApiHook
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import (
    DAG,
    AssetOrTimeSchedule,
    BaseHook,
    CronTriggerTimetable,
    ObjectStoragePath,
    Param,
    task,
)

from abm_provider.operators.account_lists import (
    AddAccountsToListOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
    RemoveAccountsFromListOperator,
)
from abm_provider.transfers.csv_to_sql import warehouse_asset

ABM_CONN_ID = os.environ.get("ABM_CONN_ID", "abm_default")
WAREHOUSE_CONN_ID = os.environ.get("ABM_WAREHOUSE_CONN_ID", "abm_warehouse")
TARGET_TABLE = os.environ.get("ABM_TARGET_ACCOUNTS_TABLE", "abm_target_accounts")
FOLDER_NAME = os.environ.get("ABM_LIST_FOLDER", "Warehouse sync")
LIST_NAME = os.environ.get("ABM_LIST_NAME", "Target accounts")
MEMBERSHIP_TABLE = "abm_list_membership"
REJECTS_TABLE = "abm_list_rejects"
# The same Asset ExecutionCsvToSqlOperator declares for a table, so a load into it triggers this DAG.
TARGET_ACCOUNTS = warehouse_asset(WAREHOUSE_CONN_ID, TARGET_TABLE)

_LIST_ID = "{{ ti.xcom_pull(task_ids='ensure_list')['listId'] }}"
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")

# Target columns -> request fields; the warehouse keeps snake_case names.
COLUMN_MAP = {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"}

CREATE_TABLES = [
    f"CREATE TABLE IF NOT EXISTS {MEMBERSHIP_TABLE} (list_id VARCHAR NOT NULL, account_id VARCHAR NOT NULL, "
    "account_name VARCHAR, crm_org_id VARCHAR, added_at TIMESTAMP NOT NULL, run_id VARCHAR NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {REJECTS_TABLE} (list_id VARCHAR NOT NULL, account_id VARCHAR, "
    "action VARCHAR NOT NULL, reason VARCHAR NOT NULL, source_row VARCHAR, run_id VARCHAR NOT NULL, "
    "recorded_at TIMESTAMP NOT NULL)",
]

# Accounts in the target set that are neither on the list yet nor refused before for this list.
TO_ADD_SQL = f"""
SELECT t.account_id, t.account_name, t.crm_org_id
FROM {TARGET_TABLE} t
WHERE NOT EXISTS (SELECT 1 FROM {MEMBERSHIP_TABLE} m
                  WHERE m.list_id = '{_LIST_ID}' AND m.account_id = t.account_id)
  AND NOT EXISTS (SELECT 1 FROM {REJECTS_TABLE} r
                  WHERE r.list_id = '{_LIST_ID}' AND r.action = 'add' AND r.account_id = t.account_id)
ORDER BY t.account_id
"""

# Accounts on the list that left the target set; nothing at all unless the mirror param is on.
TO_REMOVE_SQL = f"""
SELECT m.account_id, m.crm_org_id
FROM {MEMBERSHIP_TABLE} m
WHERE m.list_id = '{_LIST_ID}'
  AND {{% if params.mirror %}}NOT EXISTS (SELECT 1 FROM {TARGET_TABLE} t WHERE t.account_id = m.account_id)
      {{% else %}}1 = 0{{% endif %}}
ORDER BY m.account_id
"""


def _warehouse() -> DbApiHook:
    hook = BaseHook.get_connection(WAREHOUSE_CONN_ID).get_hook()
    if not isinstance(hook, DbApiHook):
        raise TypeError(f"connection {WAREHOUSE_CONN_ID!r} is not a common-sql (DbApiHook) connection")
    return hook


def _checked_list_id(list_id: str) -> str:
    """List ids go into SQL text below, so only the service's id alphabet is accepted."""
    if not _SAFE_ID.fullmatch(list_id):
        raise ValueError(f"unexpected list id {list_id!r} from ensure_list")
    return list_id


def _read_rejects(path: str | None) -> list[dict[str, str]]:
    if not path:
        return []
    with ObjectStoragePath(path).open("r", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


@task
def record_changes(
    added: dict[str, Any], removed: dict[str, Any], list_id: str, run_id: str
) -> dict[str, int]:
    """Write this run's outcome to the warehouse so the next run sends only the change.

    Rejects first (replacing any of this run's from an earlier try, so a retry is idempotent), then
    the members: what the add step selects minus what was refused, which is exactly ``TO_ADD_SQL``
    once the rejects are in. Leavers are deleted only when the remove step sent something (mirror on).
    The target table is read again here, so an edit between the add and this step is picked up next run.
    """
    list_id = _checked_list_id(list_id)
    now = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None)
    run_literal = run_id.replace("'", "''")
    reject_rows = [
        (list_id, r["id"] or None, action, r["reason"], r["row"], run_id, now)
        for action, summary in (("add", added), ("remove", removed))
        for r in _read_rejects(summary.get("rejects_path"))
    ]
    hook = _warehouse()
    hook.run(f"DELETE FROM {REJECTS_TABLE} WHERE list_id = '{list_id}' AND run_id = '{run_literal}'")
    if reject_rows:
        hook.insert_rows(
            REJECTS_TABLE,
            reject_rows,
            target_fields=[
                "list_id",
                "account_id",
                "action",
                "reason",
                "source_row",
                "run_id",
                "recorded_at",
            ],
        )
    statements = [
        f"INSERT INTO {MEMBERSHIP_TABLE} (list_id, account_id, account_name, crm_org_id, added_at, run_id) "
        f"SELECT '{list_id}', a.account_id, a.account_name, a.crm_org_id, "
        f"CAST('{now.isoformat()}' AS TIMESTAMP), '{run_literal}' "
        f"FROM ({TO_ADD_SQL.replace(_LIST_ID, list_id)}) a"
    ]
    if removed.get("sent"):
        statements.append(
            f"DELETE FROM {MEMBERSHIP_TABLE} WHERE list_id = '{list_id}' AND NOT EXISTS "
            f"(SELECT 1 FROM {TARGET_TABLE} t WHERE t.account_id = {MEMBERSHIP_TABLE}.account_id)"
        )
    hook.run(statements)
    return {
        "added": int(added.get("added", 0)),
        "duplicates": int(added.get("duplicates", 0)),
        "not_found": int(added.get("not_found", 0)) + int(removed.get("not_found", 0)),
        "rejected": int(added.get("rejected", 0)) + int(removed.get("rejected", 0)),
        "removed": int(removed.get("removed", 0)),
    }


with DAG(
    dag_id="abm_sync_account_lists",
    description="Add new target accounts to the ABM list and remove those that left the target set.",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 6 * * *", timezone="UTC"), assets=[TARGET_ACCOUNTS]
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"mirror": Param(os.environ.get("ABM_LIST_MIRROR", "true").lower() == "true", type="boolean")},
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["abm", "account-lists"],
    doc_md=__doc__,
) as dag:
    prepare_tables = SQLExecuteQueryOperator(
        task_id="prepare_tables", conn_id=WAREHOUSE_CONN_ID, sql=CREATE_TABLES, split_statements=False
    )
    ensure_folder = CreateAccountListFolderOperator(
        task_id="ensure_folder", abm_conn_id=ABM_CONN_ID, folder_name=FOLDER_NAME, if_exists="reuse"
    )
    ensure_list = CreateAccountListOperator(
        task_id="ensure_list",
        abm_conn_id=ABM_CONN_ID,
        list_name=LIST_NAME,
        folder_id=ensure_folder.output["folderId"],
        if_exists="reuse",
    )
    add_accounts = AddAccountsToListOperator(
        task_id="add_new_accounts",
        abm_conn_id=ABM_CONN_ID,
        list_id=_LIST_ID,
        sql=TO_ADD_SQL,
        sql_conn_id=WAREHOUSE_CONN_ID,
        column_map=COLUMN_MAP,
        # Bad rows and unknown accounts are recorded in the warehouse and not retried; they do not
        # hold back the thousands of good ones.
        max_rejected=None,
        on_limit="warn",
    )
    remove_accounts = RemoveAccountsFromListOperator(
        task_id="remove_departed_accounts",
        abm_conn_id=ABM_CONN_ID,
        list_id=_LIST_ID,
        sql=TO_REMOVE_SQL,
        sql_conn_id=WAREHOUSE_CONN_ID,
        column_map=COLUMN_MAP,
        max_rejected=None,
        on_limit="warn",
    )
    recorded = record_changes(
        add_accounts.output, remove_accounts.output, list_id=_LIST_ID, run_id="{{ run_id }}"
    )
    [prepare_tables, ensure_list] >> add_accounts >> remove_accounts >> recorded
