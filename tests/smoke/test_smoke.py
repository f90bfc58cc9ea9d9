"""The smoke subset: the provider's main paths on whatever Airflow this venv holds.

``make compat`` runs it in venvs holding the built wheels: Airflow 3.1.2 (the floor, from a plain pip
install and at the lowest dependencies), the newest 3.1 and 3.2 on Python 3.11, the newest Airflow on
3.12 and 3.13; ``make release-check`` in a fresh venv from the built files, on the pinned Airflow.
Each test is one thing a user does first: import, parse the example DAGs, write through the provider's
local paths, create a folder and a list and add accounts, run the export DAG (its sensor defers, its
load writes DuckDB) and the list sync DAG, load an export into MariaDB through the MySQL dialect's
``LOAD DATA`` path.
"""

from __future__ import annotations

import csv
import importlib
import os
import pkgutil
from contextlib import closing
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
from smoke_support import DAGS, fire_once_deferred, record_trigger_runs, run_dag, task_states

import abm_provider
from abm_emulator.csvgen import EXPORT_COLUMNS

EXPORT_TYPE = "TACTIC_PERFORMANCE"


def test_the_installed_provider_is_the_one_under_test() -> None:
    """In the release and compat venvs the provider must come from the built wheel, not the tree."""
    expected = os.environ.get("ABM_SMOKE_EXPECT_SITE_PACKAGES")
    if expected is None:
        pytest.skip("the full suite runs the provider from the source tree")
    assert str(Path(abm_provider.__file__).resolve()).startswith(expected), abm_provider.__file__


def test_every_module_imports() -> None:
    names = [m.name for m in pkgutil.walk_packages(abm_provider.__path__, "abm_provider.")]
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as err:
            failed[name] = repr(err)
    assert failed == {}
    assert {"abm_provider.compat", "abm_provider.hooks.abm", "abm_provider.warehouse.dialects.duckdb"} <= set(
        names
    )


def test_the_state_dir_set_in_the_airflow_configuration_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[abm] state_dir`` of airflow.cfg: Airflow 3.1 keeps its configuration elsewhere than 3.2 does."""
    from abm_provider.common.paths import default_state_dir
    from abm_provider.compat import airflow_conf

    monkeypatch.delenv("AIRFLOW__ABM__STATE_DIR", raising=False)
    conf = airflow_conf()
    if not conf.has_section("abm"):
        conf.add_section("abm")
    conf.set("abm", "state_dir", str(tmp_path))
    try:
        assert default_state_dir() == str(tmp_path)
    finally:
        conf.remove_option("abm", "state_dir")


def test_the_providers_local_paths_work_with_this_universal_pathlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Archives, rejects and account files given as local paths become ``file://`` ObjectStoragePaths.

    universal-pathlib 0.3 refuses ``file://`` in Airflow 3.1.0's ``ObjectStoragePath`` ("detected
    protocol file which is incompatible with ObjectStoragePath"); every Airflow the provider allows
    takes it with the universal-pathlib it installs (0.2 on 3.1, 0.3 on 3.2 and 3.3).
    """
    from abm_provider.common.paths import as_storage_path, is_local, local_path

    monkeypatch.chdir(tmp_path)
    path = as_storage_path("state/export.csv")
    assert (path.protocol, is_local(path), local_path(path)) == (
        "file",
        True,
        str(tmp_path / "state/export.csv"),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("id\n1\n")
    assert (tmp_path / "state" / "export.csv").read_text() == "id\n1\n"


def test_the_example_dags_parse() -> None:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert {"abm_export_to_warehouse", "abm_sync_account_lists"} <= set(bag.dag_ids)


def test_operators_create_a_folder_and_a_list_and_add_accounts(abm_emulator: Any) -> None:
    from abm_provider.hooks.abm import AbmHook
    from abm_provider.operators.account_lists import (
        AddAccountsToListOperator,
        CreateAccountListFolderOperator,
        CreateAccountListOperator,
    )

    assert AbmHook().test_connection()[0] is True
    folder = CreateAccountListFolderOperator(task_id="folder", folder_name="Smoke").execute({})
    created = CreateAccountListOperator(
        task_id="list", list_name="Smoke list", folder_id=folder["folderId"]
    ).execute({})
    ids = [f"001{n:015d}" for n in range(1, 6)]
    AddAccountsToListOperator(
        task_id="add", list_id=created["listId"], accounts=[{"id": i} for i in ids]
    ).execute({})
    assert {m["id"] for m in abm_emulator.members(created["listId"])} == set(ids)


@pytest.mark.timeout(300)
def test_the_export_dag_defers_then_loads_duckdb(
    abm_emulator: Any, metadata_db: None, duckdb_warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deferred = record_trigger_runs(monkeypatch)
    thread = fire_once_deferred(abm_emulator, EXPORT_TYPE, deferred, [])
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    dag_run = run_dag("abm_export_to_warehouse.py", logical_date=today - timedelta(days=2))
    thread.join(5)
    assert str(dag_run.state) == "success", task_states(dag_run)
    assert deferred, "the sensor never deferred"
    with duckdb.connect(str(duckdb_warehouse)) as conn:
        rows = conn.execute("SELECT COUNT(*) FROM abm_tactic_performance").fetchone()
        ledger = conn.execute("SELECT COUNT(*) FROM abm_load_ledger").fetchone()
    assert rows is not None and rows[0] > 0
    assert ledger == (1,)


@pytest.mark.timeout(300)
def test_the_sync_dag_adds_the_target_accounts(
    abm_emulator: Any, metadata_db: None, duckdb_warehouse: Path
) -> None:
    ids = sorted(f"001{n:015d}" for n in range(1, 21))
    with duckdb.connect(str(duckdb_warehouse)) as conn:
        conn.execute(
            "CREATE TABLE abm_target_accounts (account_id VARCHAR, account_name VARCHAR, crm_org_id VARCHAR)"
        )
        conn.executemany(
            "INSERT INTO abm_target_accounts VALUES (?, ?, NULL)", [[i, f"Account {i}"] for i in ids]
        )
    dag_run = run_dag("abm_sync_account_lists.py")
    assert str(dag_run.state) == "success", task_states(dag_run)
    with duckdb.connect(str(duckdb_warehouse)) as conn:
        recorded = [
            r[0] for r in conn.execute("SELECT account_id FROM abm_sync_members ORDER BY 1").fetchall()
        ]
        (list_id,) = {r[0] for r in conn.execute("SELECT list_id FROM abm_sync_members").fetchall()}
    assert recorded == ids
    assert sorted(m["id"] for m in abm_emulator.members(list_id)) == ids


def test_an_export_loads_into_mariadb_through_the_mysql_dialect(
    mysql_warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The [mysql] extra: a MySqlHook gets the MySQL dialect, whose ``LOAD DATA LOCAL INFILE`` path loads."""
    from airflow.providers.mysql.hooks.mysql import MySqlHook

    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
    from abm_provider.warehouse.dialects import dialect_name
    from abm_provider.warehouse.dialects.mysql import MySQLDialect

    assert dialect_name(MySqlHook(mysql_conn_id="abm_smoke_mysql")) == "mysql"
    bulk: list[Any] = []  # what each LOAD DATA returned: None when the load fell back to Python
    load_data = MySQLDialect._load_data

    def recording_load_data(self: MySQLDialect, *args: Any, **kwargs: Any) -> Any:
        bulk.append(load_data(self, *args, **kwargs))
        return bulk[-1]

    monkeypatch.setattr(MySQLDialect, "_load_data", recording_load_data)
    names = ['Spring, "Launch"', "Café Münster", "日本語 キャンペーン", "plain"]
    rows = [
        ["2026-01-0" + str(day), f"c{t % 2}", names[t], f"t{t}", f"{names[-t - 1]} #{t}", str(1000 * t + day),
         str(t + day), f"{t * 12.5 + day:.2f}"]
        for day in (1, 2, 3)
        for t in range(len(names))
    ]  # fmt: skip
    export = tmp_path / "tactics.csv"
    with export.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(EXPORT_COLUMNS[EXPORT_TYPE])
        writer.writerows(rows)

    def load() -> dict[str, Any]:
        return ExecutionCsvToSqlOperator(
            task_id="load_mysql",
            source=str(export),
            sql_conn_id="abm_smoke_mysql",
            table=f"{mysql_warehouse}.abm_tactic_performance",
            export_type=EXPORT_TYPE,
            execution_id="smoke-mysql-1",
        ).execute({})

    result = load()
    assert (result["method"], result["rows_loaded"], result["rows_rejected"]) == ("mysql_load_data", 12, 0)
    assert len(bulk) == 1 and bulk[0] is not None, "LOAD DATA did not stage the file; it went through Python"
    assert load()["skipped"] is True  # the ledger knows the execution
    conn = MySqlHook(mysql_conn_id="abm_smoke_mysql").get_conn()
    with closing(conn):
        cur = conn.cursor()
        cur.execute(
            f"SELECT COUNT(*), SUM(impressions), SUM(spend) FROM `{mysql_warehouse}`.abm_tactic_performance"
        )
        assert cur.fetchone() == (12, sum(int(r[5]) for r in rows), sum(Decimal(r[7]) for r in rows))
        cur.execute(
            f"SELECT DISTINCT campaign_name FROM `{mysql_warehouse}`.abm_tactic_performance ORDER BY 1"
        )
        assert [r[0] for r in cur.fetchall()] == sorted(names)
        cur.execute(f"SELECT execution_id, rows_loaded FROM `{mysql_warehouse}`.abm_load_ledger")
        assert cur.fetchall() == (("smoke-mysql-1", 12),)
