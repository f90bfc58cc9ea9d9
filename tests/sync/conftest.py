"""Fixtures of the list-sync tests: the emulator as ``abm_default`` and a warehouse on DuckDB or PostgreSQL.

Each test gets its own DuckDB file or its own PostgreSQL schema, reached through the Airflow connection
``abm_warehouse`` set in the environment.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sync_support import CONN_ID, PG_DATABASE, PG_DSN, Warehouse, postgres_reason


@pytest.fixture(params=["duckdb", "postgres"])
def warehouse(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Warehouse]:
    if request.param == "duckdb":
        path = tmp_path / "warehouse.duckdb"
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "duckdb", "host": str(path)})
        )
        yield Warehouse("duckdb", str(path), None)
        return
    reason = postgres_reason()
    if reason:
        pytest.skip(reason)
    import psycopg

    schema = f"sync_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    conn_value = {
        "conn_type": "postgres",
        "host": "127.0.0.1",
        "port": 5432,
        "login": "postgres",
        "schema": PG_DATABASE,
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn_value))
    try:
        yield Warehouse("postgres", PG_DSN, schema)
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The emulator as the default ABM connection."""
    conn = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", json.dumps(conn))
    return emulator
