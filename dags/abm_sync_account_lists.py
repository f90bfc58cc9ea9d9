"""Keep an ABM account list in step with the warehouse's target-accounts table.

Runs when the target-accounts Asset is updated, and daily. The warehouse holds what was sent before
(``abm_list_membership``) and what the service or the validator refused (``abm_list_rejects``), so each
run sends only the change: accounts that joined the target set are added, and with the ``mirror``
param (default on) accounts that left it are removed.

Each run first writes its change set to ``abm_list_changes`` (keyed by list and run id); the add and
remove steps read that, and the bookkeeping step records exactly that set minus what was refused. So
an edit to the target table while the run is under way is neither recorded unsent nor lost: the next
run sees it. A refused row is not sent again until its values change (a corrected ``crm_org_id``, say).
The connections, the target table and the folder and list names come from the environment
(``ABM_*`` variables), so the same file runs on the embedded defaults (emulator + DuckDB) and on
PostgreSQL and the real service; the three bookkeeping tables keep fixed names.
"""

from __future__ import annotations

import csv
import json
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
# Task retries for transient failures; the demo and the tests set 0 so a failure shows at once.
RETRIES = int(os.environ.get("ABM_TASK_RETRIES", "2"))
TARGET_TABLE = os.environ.get("ABM_TARGET_ACCOUNTS_TABLE", "abm_target_accounts")
FOLDER_NAME = os.environ.get("ABM_LIST_FOLDER", "Warehouse sync")
LIST_NAME = os.environ.get("ABM_LIST_NAME", "Target accounts")
MEMBERSHIP_TABLE = "abm_list_membership"
REJECTS_TABLE = "abm_list_rejects"
CHANGES_TABLE = "abm_list_changes"
# The same Asset ExecutionCsvToSqlOperator declares for a table, so a load into it triggers this DAG.
TARGET_ACCOUNTS = warehouse_asset(WAREHOUSE_CONN_ID, TARGET_TABLE)

_LIST_ID = "{{ ti.xcom_pull(task_ids='ensure_list')['listId'] }}"
_RUN_ID = '{{ run_id | replace("\'", "\'\'") }}'
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")

# Target columns -> request fields; the warehouse keeps snake_case names.
COLUMN_MAP = {"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"}

CREATE_TABLES = [
    f"CREATE TABLE IF NOT EXISTS {MEMBERSHIP_TABLE} (list_id VARCHAR NOT NULL, account_id VARCHAR NOT NULL, "
    "account_name VARCHAR, crm_org_id VARCHAR, added_at TIMESTAMP NOT NULL, run_id VARCHAR NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {REJECTS_TABLE} (list_id VARCHAR NOT NULL, account_id VARCHAR, "
    "account_name VARCHAR, crm_org_id VARCHAR, action VARCHAR NOT NULL, reason VARCHAR NOT NULL, "
    "source_row VARCHAR, run_id VARCHAR NOT NULL, recorded_at TIMESTAMP NOT NULL)",
    f"CREATE TABLE IF NOT EXISTS {CHANGES_TABLE} (list_id VARCHAR NOT NULL, run_id VARCHAR NOT NULL, "
    "action VARCHAR NOT NULL, account_id VARCHAR, account_name VARCHAR, crm_org_id VARCHAR)",
]

# Accounts in the target set that are not on the list yet and were not refused before with these
# very values (a corrected row is a change and is sent again).
TO_ADD_SQL = f"""
SELECT t.account_id, t.account_name, t.crm_org_id
FROM {TARGET_TABLE} t
WHERE NOT EXISTS (SELECT 1 FROM {MEMBERSHIP_TABLE} m
                  WHERE m.list_id = '{{list_id}}' AND m.account_id = t.account_id)
  AND NOT EXISTS (SELECT 1 FROM {REJECTS_TABLE} r
                  WHERE r.list_id = '{{list_id}}' AND r.action = 'add'
                    AND r.account_id IS NOT DISTINCT FROM t.account_id
                    AND r.account_name IS NOT DISTINCT FROM t.account_name
                    AND r.crm_org_id IS NOT DISTINCT FROM t.crm_org_id)
"""

# Accounts on the list that left the target set.
TO_REMOVE_SQL = f"""
SELECT m.account_id, m.account_name, m.crm_org_id
FROM {MEMBERSHIP_TABLE} m
WHERE m.list_id = '{{list_id}}'
  AND NOT EXISTS (SELECT 1 FROM {TARGET_TABLE} t WHERE t.account_id = m.account_id)
"""


def _changes_sql(action: str) -> str:
    """What the add or remove step sends: this run's planned change set, nothing else."""
    return (
        f"SELECT account_id, account_name, crm_org_id FROM {CHANGES_TABLE} "
        f"WHERE list_id = '{_LIST_ID}' AND run_id = '{_RUN_ID}' AND action = '{action}' "
        "ORDER BY account_id"
    )


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


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _read_rejects(path: str | None) -> list[dict[str, str]]:
    """The rejects file's rows, with the refused row's account ``id`` and its JSON (``raw``) as ``row``."""
    if not path:
        return []
    with ObjectStoragePath(path).open("r", encoding="utf-8", newline="") as handle:
        rejects = list(csv.DictReader(handle))
    for reject in rejects:
        reject["row"] = reject.get("raw") or ""
        try:
            row = json.loads(reject["row"] or "null")
        except ValueError:
            row = None
        account_id = row.get(COLUMN_MAP["id"], row.get("id")) if isinstance(row, dict) else None
        reject["id"] = "" if account_id is None else str(account_id)
    return rejects


def _source_values(reject: dict[str, str]) -> tuple[str | None, str | None]:
    """The refused row's name and org as read from the target table (the rejects file keeps it as JSON)."""
    try:
        row = json.loads(reject.get("raw") or "null")
    except ValueError:
        row = None
    if not isinstance(row, dict):
        return None, None
    name = row.get(COLUMN_MAP["name"], row.get("name"))
    org = row.get(COLUMN_MAP["crmOrgId"], row.get("crmOrgId"))
    return (None if name is None else str(name)), (None if org is None else str(org))


@task
def plan_changes(
    list_id: str, run_id: str | None = None, params: dict[str, Any] | None = None
) -> dict[str, int]:
    """Write this run's change set once, so the send steps and the bookkeeping agree on it.

    A retry replaces the run's rows: the plan is recomputed from the same membership (which only the
    bookkeeping step at the end of a run changes), so re-running is safe.
    """
    list_id = _checked_list_id(list_id)
    assert run_id is not None
    mirror = bool((params or {}).get("mirror", True))
    run = _literal(run_id)
    statements = [
        f"DELETE FROM {CHANGES_TABLE} WHERE list_id = '{list_id}' AND run_id = {run}",
        f"INSERT INTO {CHANGES_TABLE} (list_id, run_id, action, account_id, account_name, crm_org_id) "
        f"SELECT '{list_id}', {run}, 'add', a.account_id, a.account_name, a.crm_org_id "
        f"FROM ({TO_ADD_SQL.format(list_id=list_id)}) a",
    ]
    if mirror:
        statements.append(
            f"INSERT INTO {CHANGES_TABLE} (list_id, run_id, action, account_id, account_name, crm_org_id) "
            f"SELECT '{list_id}', {run}, 'remove', d.account_id, d.account_name, d.crm_org_id "
            f"FROM ({TO_REMOVE_SQL.format(list_id=list_id)}) d"
        )
    hook = _warehouse()
    hook.run(statements)
    counts = dict(
        hook.get_records(
            f"SELECT action, COUNT(*) FROM {CHANGES_TABLE} WHERE list_id = '{list_id}' AND run_id = {run} "
            "GROUP BY action"
        )
    )
    return {"to_add": int(counts.get("add", 0)), "to_remove": int(counts.get("remove", 0))}


@task
def record_changes(
    added: dict[str, Any], removed: dict[str, Any], list_id: str, run_id: str
) -> dict[str, int]:
    """Write this run's outcome to the warehouse so the next run sends only the change.

    Rejects first (replacing any of this run's from an earlier try), then the members: the planned
    additions minus the refused ones, and the planned removals deleted. Each statement replaces what
    it writes for this run, so a retry after a failure part-way leaves the same tables as one clean run.
    """
    list_id = _checked_list_id(list_id)
    now = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None)
    run = _literal(run_id)
    reject_rows = [
        (list_id, r["id"] or None, *_source_values(r), action, r["reason"], r["row"], run_id, now)
        for action, summary in (("add", added), ("remove", removed))
        for r in _read_rejects(summary.get("rejects_path"))
    ]
    hook = _warehouse()
    hook.run(f"DELETE FROM {REJECTS_TABLE} WHERE list_id = '{list_id}' AND run_id = {run}")
    if reject_rows:
        hook.insert_rows(
            REJECTS_TABLE,
            reject_rows,
            target_fields=[
                "list_id",
                "account_id",
                "account_name",
                "crm_org_id",
                "action",
                "reason",
                "source_row",
                "run_id",
                "recorded_at",
            ],
        )
    planned = f"FROM {CHANGES_TABLE} c WHERE c.list_id = '{list_id}' AND c.run_id = {run}"
    hook.run(
        [
            f"DELETE FROM {MEMBERSHIP_TABLE} WHERE list_id = '{list_id}' AND account_id IN "
            f"(SELECT c.account_id {planned} AND c.action IN ('add', 'remove'))",
            f"INSERT INTO {MEMBERSHIP_TABLE} "
            "(list_id, account_id, account_name, crm_org_id, added_at, run_id) "
            f"SELECT c.list_id, c.account_id, c.account_name, c.crm_org_id, "
            f"CAST('{now.isoformat()}' AS TIMESTAMP), {run} {planned} AND c.action = 'add' "
            f"AND c.account_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {REJECTS_TABLE} r "
            f"WHERE r.list_id = c.list_id AND r.run_id = c.run_id AND r.action = 'add' "
            f"AND r.account_id = c.account_id)",
        ]
    )
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
    default_args={"retries": RETRIES, "retry_delay": timedelta(minutes=2)},
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
        # ``output["folderId"]`` would be an XCom *key*; the folder is one dict under the default key.
        folder_id="{{ ti.xcom_pull(task_ids='ensure_folder')['folderId'] }}",
        if_exists="reuse",
    )
    planned = plan_changes(list_id=_LIST_ID)
    add_accounts = AddAccountsToListOperator(
        task_id="add_new_accounts",
        abm_conn_id=ABM_CONN_ID,
        list_id=_LIST_ID,
        sql=_changes_sql("add"),
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
        sql=_changes_sql("remove"),
        sql_conn_id=WAREHOUSE_CONN_ID,
        column_map=COLUMN_MAP,
        max_rejected=None,
        on_limit="warn",
    )
    recorded = record_changes(
        add_accounts.output, remove_accounts.output, list_id=_LIST_ID, run_id="{{ run_id }}"
    )
    ensure_folder >> ensure_list
    [prepare_tables, ensure_list] >> planned >> add_accounts >> remove_accounts >> recorded
