"""Warehouses for the loader tests: DuckDB file, real PostgreSQL (own schema per test), real MariaDB (own
database per test), and the generic path.

The generic path runs twice: against PostgreSQL (``method="generic"``) and against SQLite through a
minimal common-sql ``DbApiHook`` (the SQLite provider is not installed, and no dialect is registered
for it), so it is exercised on a driver with a different parameter style and no native types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.warehouses import (
    make_warehouse,
    mariadb_database,
    native_warehouse,
    pg_conn,
    pg_schema,
    warehouse,
)

__all__ = ["abm", "mariadb_database", "native_warehouse", "pg_conn", "pg_schema", "target", "warehouse"]

#: The export the tests that load executions from the emulator fire.
EXPORT_TYPE = "TACTIC_PERFORMANCE"


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The emulator as ``abm_default`` with an export job, archives under the test's folder."""
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", emulator.airflow_connection())
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path / "state"))
    from abm_provider.hooks.abm import AbmHook

    AbmHook("abm_default").create_export_job(EXPORT_TYPE, "0 5 1 1 *")
    return emulator


@pytest.fixture(params=["postgres", "duckdb"])
def target(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A native warehouse to load executions into: PostgreSQL, then DuckDB."""
    return make_warehouse(request.param, tmp_path, monkeypatch, request)
