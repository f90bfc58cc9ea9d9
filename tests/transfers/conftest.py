"""Fixtures of the loader tests: the warehouses of ``support.warehouses`` (a DuckDB file, a schema of
the test PostgreSQL, a database of the test MariaDB, the generic path on PostgreSQL and SQLite), and
the emulator with an export job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.warehouses import make_warehouse, native_warehouse, pg_conn, warehouse

__all__ = ["abm", "native_warehouse", "pg_conn", "target", "warehouse"]

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
