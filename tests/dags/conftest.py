"""Fixtures for running the example DAGs with ``dag.test()`` against the emulator, into DuckDB and
PostgreSQL, and the export DAG into Snowflake (fakesnow) and BigQuery (bqemulator) too.

Every connection comes from ``AIRFLOW_CONN_*`` environment variables (monkeypatched per test), as
the DAGs would get them in production; nothing is written to the metadata database's connection
table. The DAG files read their settings from the environment at import, so each test imports them
afresh after the environment is set (``dagtest_support.load_dag``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagtest_support import TABLES, BigQueryWarehouse, ExportWarehouse, SnowflakeWarehouse, Warehouse

from support.warehouses import DAGS, postgres_unusable


@pytest.fixture(params=["duckdb", "postgres"])
def warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    """A DuckDB file in the test's folder, or the DAG tests' PostgreSQL database with its tables dropped."""
    yield from _warehouse(request, tmp_path)


@pytest.fixture(params=["duckdb", "postgres", "snowflake", "bigquery"])
def export_warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExportWarehouse]:
    """Where the export DAG loads: :func:`warehouse`'s, a database of the test's own on fakesnow, and a
    dataset of its own on bqemulator."""
    if request.param == "snowflake":
        yield SnowflakeWarehouse(request.getfixturevalue("snowflake_connection"))
        return
    if request.param == "bigquery":
        yield BigQueryWarehouse(request.getfixturevalue("bigquery_connection"))
        return
    yield from _warehouse(request, tmp_path)


def _warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Warehouse]:
    if request.param == "duckdb":
        yield Warehouse("duckdb", DAGS.connection("duckdb"), tmp_path / "warehouse.duckdb")
        return
    reason = postgres_unusable(DAGS.database)
    if reason is not None:
        pytest.skip(f"skipping the PostgreSQL variant: {reason}")
    target = Warehouse("postgres", DAGS.connection("postgres"), DAGS.database)
    target.execute("; ".join(f"DROP TABLE IF EXISTS {t}" for t in TABLES))
    yield target


@pytest.fixture
def dag_env(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    emulator: Any,
    airflow_db: Path,
) -> Path:
    """Connections and knobs for the DAGs through the environment; returns the state folder.

    ``abm_warehouse`` reaches the test's ``export_warehouse`` when it asks for one, else its ``warehouse``.
    """
    chosen = "export_warehouse" if "export_warehouse" in request.fixturenames else "warehouse"
    monkeypatch.setenv("AIRFLOW_CONN_ABM_WAREHOUSE", request.getfixturevalue(chosen).conn_env)
    state = tmp_path / "state"
    monkeypatch.setenv(
        "AIRFLOW_CONN_ABM_DEFAULT",
        json.dumps({"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}),
    )
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(state))
    monkeypatch.setenv("ABM_POKE_INTERVAL", "1")
    monkeypatch.setenv("ABM_TASK_RETRIES", "0")
    return state
