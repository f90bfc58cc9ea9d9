"""``abm_export_to_warehouse`` end to end with ``dag.test()``: emulator -> file -> warehouse -> checks.

The expectation is computed from the downloaded files with Python's ``csv`` module, independently of
the loader: after executions N and N+1 (a day later, restating the last 48 hours) the table holds, for
every natural key, the row of the later file that has it, and nothing else.
"""

from __future__ import annotations

import csv
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from dagtest_support import BigQueryWarehouse, ExportWarehouse, load_dag, task_states, xcom

from smoke.smoke_support import fire_once_deferred, record_trigger_runs

EXPORT_TYPE = "TACTIC_PERFORMANCE"
TABLE = "abm_tactic_performance"
COLUMNS = (
    "date",
    "campaign_id",
    "campaign_name",
    "tactic_id",
    "tactic_name",
    "impressions",
    "clicks",
    "spend",
)
CHECKS = ("check_row_count", "check_keys_not_null", "check_no_duplicate_keys")

Row = tuple[Any, ...]


def _value(column: str, value: Any) -> Any:
    """One comparable form for a CSV string and a database value of the same column."""
    if value is None or value == "":
        return None
    if column == "date":
        return value.isoformat() if isinstance(value, date) else str(value)
    if column in ("impressions", "clicks"):
        return int(value)
    if column == "spend":
        return Decimal(str(value)).quantize(Decimal("0.01"))
    return str(value)


def file_rows(path: str) -> dict[tuple[str, str], Row]:
    with open(path, encoding="utf-8", newline="") as handle:
        rows = [tuple(_value(c, r[c]) for c in COLUMNS) for r in csv.DictReader(handle)]
    table = {(r[0], r[3]): r for r in rows}
    assert len(table) == len(rows), f"{path} repeats a natural key; the expectation below assumes it does not"
    return table


def table_rows(warehouse: ExportWarehouse) -> dict[tuple[str, str], Row]:
    rows = [
        tuple(_value(c, v) for c, v in zip(COLUMNS, row, strict=True))
        for row in warehouse.query(f"SELECT {', '.join(COLUMNS)} FROM {TABLE}")
    ]
    table = {(r[0], r[3]): r for r in rows}
    assert len(table) == len(rows), "the warehouse table holds duplicate natural keys"
    return table


def ledger(warehouse: ExportWarehouse) -> list[tuple[Any, ...]]:
    return warehouse.query(
        "SELECT execution_id, export_type, sha256, rows_loaded, bytes FROM abm_load_ledger ORDER BY loaded_at"
    )


def asset_partition_keys(dag_run: Any, task_id: str) -> list[str]:
    """The partition keys of the Asset events the task of the run emitted, from the metadata DB."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        keys = session.scalars(
            select(AssetEvent.partition_key).where(
                AssetEvent.source_dag_id == dag_run.dag_id,
                AssetEvent.source_run_id == dag_run.run_id,
                AssetEvent.source_task_id == task_id,
            )
        ).all()
    return sorted(str(key) for key in keys)


def run_dag(logical_date: datetime) -> Any:
    dag = load_dag("abm_export_to_warehouse.py")
    dag_run = dag.test(logical_date=logical_date)
    states = task_states(dag_run)
    assert str(dag_run.state) == "success", f"DAG run failed: {states}"
    assert all(states[c] == "success" for c in CHECKS), states
    return dag_run


@pytest.mark.timeout(300)
def test_export_dag_loads_restates_and_reruns_idempotently(
    dag_env: Path,
    emulator: Any,
    export_warehouse: ExportWarehouse,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warehouse = export_warehouse
    if isinstance(warehouse, BigQueryWarehouse):  # BigQuery names a table with its dataset
        monkeypatch.setenv("ABM_EXPORT_TABLE", warehouse.table(TABLE))
    trigger_runs = record_trigger_runs(monkeypatch)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

    # Run 1: the DAG creates the job itself; the execution appears while the sensor is deferred.
    fired: list[dict[str, Any]] = []
    thread = fire_once_deferred(emulator, EXPORT_TYPE, trigger_runs, fired)
    first = run_dag(today - timedelta(days=3))
    thread.join(5)
    assert fired, "no execution was fired"
    assert trigger_runs, "the sensor never deferred: the inline trigger did not run"
    assert xcom(first, "wait_for_execution")["id"] == fired[0]["id"]
    download_1 = xcom(first, "load_warehouse")  # one task: the load downloads, and keeps the archive
    expected = file_rows(download_1["archive"])
    assert table_rows(warehouse) == expected
    assert ledger(warehouse) == [
        (fired[0]["id"], EXPORT_TYPE, download_1["sha256"], len(expected), download_1["bytes"])
    ]

    # Run 2: a day later; execution N+1 covers one new day and restates the last 48 hours.
    emulator.advance(24 * 3600)
    second_execution = emulator.fire(EXPORT_TYPE)
    second = run_dag(today - timedelta(days=2))
    assert xcom(second, "wait_for_execution")["id"] == second_execution["id"]
    download_2 = xcom(second, "load_warehouse")
    newer = file_rows(download_2["archive"])
    restated = [k for k in newer.keys() & expected.keys() if newer[k] != expected[k]]
    assert restated, "N+1 restates nothing, so this test would not notice an append"
    assert expected.keys() - newer.keys(), "N+1 covers every day of N, so no old row should survive"
    expected = {**expected, **newer}
    assert table_rows(warehouse) == expected
    load_2 = xcom(second, "load_warehouse")
    assert load_2["rows_loaded"] == len(newer) and load_2["rows_rejected"] == 0
    assert [row[0] for row in ledger(warehouse)] == [fired[0]["id"], second_execution["id"]]
    # The table's Asset event names the days the load replaced, one partition key each (Airflow 3.3),
    # so a DAG partitioned by day re-runs only those.
    days = sorted({str(key[0]) for key in newer})
    assert load_2["days"] == days
    assert asset_partition_keys(second, "load_warehouse") == days

    # Run 3: no new execution; the same one is found, downloaded and loaded again: nothing changes.
    third = run_dag(today - timedelta(days=1))
    assert xcom(third, "wait_for_execution")["id"] == second_execution["id"]
    assert xcom(third, "load_warehouse")["skipped"] is True
    assert table_rows(warehouse) == expected
    assert len(ledger(warehouse)) == 2
