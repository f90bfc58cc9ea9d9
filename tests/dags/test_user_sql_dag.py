"""A DAG of a user's own: a list sync whose query holds ``LIKE 'Acme%'``, run by ``airflow dags test``.

On PostgreSQL this failed before anything was sent (``psycopg.ProgrammingError: only '%s', '%b', '%t'
are allowed as placeholders``): the planner rewrote the query's text and bound a parameter list to it.
The query here is what users write: a ``WITH``, ``--`` comments, a ``LIKE`` pattern, a trailing
semicolon. The DAG runs in Airflow's own command, in a process of its own, as a user runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dagtest_support import Warehouse

from abm_provider.hooks.abm import AbmHook

DAG_FILE = '''
from datetime import datetime

from airflow.sdk import DAG

from abm_provider.operators.account_lists import (
    AccountListSyncOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
)

with DAG(dag_id="user_sql_acme", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    folder = CreateAccountListFolderOperator(task_id="folder", folder_name="User SQL")
    target = CreateAccountListOperator(task_id="list", list_name="Acme", folder_id=folder.output["folder_id"])
    AccountListSyncOperator(
        task_id="sync",
        list_id=target.output["list_id"],
        sql="""
            -- the Acme family: what about 'acme'? not in this list
            WITH acme AS (
                SELECT account_id, account_name, crm_org_id FROM user_sql_accounts
                WHERE account_name LIKE 'Acme%'
            )
            SELECT * FROM acme ORDER BY account_id;
        """,
        sql_conn_id="abm_warehouse",
        column_map={"id": "account_id", "name": "account_name", "crmOrgId": "crm_org_id"},
    )
'''
ORG = "00D000000000001"
ACCOUNTS = [
    ("001000000000000001", "Acme Corp", ORG),
    ("001000000000000002", "Acme? Labs 100%", ORG),
    ("001000000000000003", "acme lowercase", ORG),
    ("001000000000000004", "Globex", ORG),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
def test_a_sync_whose_query_has_a_like_pattern_runs_through_airflow_dags_test(
    warehouse: Warehouse, emulator: Any, airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse.replace_table("user_sql_accounts", ["account_id", "account_name", "crm_org_id"], ACCOUNTS)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "user_sql_acme.py").write_text(DAG_FILE)
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW_CONN_ABM_DEFAULT": json.dumps(
            {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
        ),
        "AIRFLOW_CONN_ABM_WAREHOUSE": warehouse.conn_env,
    }
    airflow = str(Path(sys.executable).with_name("airflow"))
    done = subprocess.run(
        [airflow, "dags", "test", "user_sql_acme"], env=env, capture_output=True, text=True, timeout=240
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "state=failed" not in out, out[-4000:]
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", env["AIRFLOW_CONN_ABM_DEFAULT"])
    hook = AbmHook()  # finds the folder and the list the DAG made, by name
    list_id = hook.ensure_list("Acme", hook.ensure_folder("User SQL")["folderId"])["listId"]
    assert {m["id"] for m in emulator.members(list_id)} == {"001000000000000001", "001000000000000002"}
    assert "staged in the warehouse" in out, "the query was planned in the warehouse"
    try:
        recorded = warehouse.query("SELECT account_id FROM abm_sync_members ORDER BY account_id")
        assert [r[0] for r in recorded] == ["001000000000000001", "001000000000000002"]
    finally:
        warehouse.execute("DROP TABLE IF EXISTS user_sql_accounts")
