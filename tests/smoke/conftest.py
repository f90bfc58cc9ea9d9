"""Fixtures of the smoke subset: the emulator comes from the ``abm-emulator`` pytest plugin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from smoke_support import isolate_airflow, migrate_metadata_db

isolate_airflow()


@pytest.fixture(scope="session")
def metadata_db() -> None:
    migrate_metadata_db()


@pytest.fixture
def duckdb_warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DuckDB file as the ``abm_warehouse`` connection, and a state folder of the test's own."""
    path = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv("AIRFLOW_CONN_ABM_WAREHOUSE", json.dumps({"conn_type": "duckdb", "host": str(path)}))
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("ABM_POKE_INTERVAL", "1")
    monkeypatch.setenv("ABM_TASK_RETRIES", "0")
    return path
