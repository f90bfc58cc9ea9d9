"""Fixtures of the smoke subset: the emulator comes from the ``abm-emulator`` pytest plugin."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

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


#: The test MariaDB (or MySQL): the smoke subset's loads get a database of their own on it.
MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "connect_timeout": 3}


def _mariadb_server() -> Any:
    """A connection to the test MariaDB's server; the test is skipped, saying why, when it does not answer."""
    import MySQLdb  # the [mysql] extra: a missing driver is a failed install, not a reason to skip

    try:
        return MySQLdb.connect(**MARIADB)
    except MySQLdb.OperationalError as exc:
        pytest.skip(f"MariaDB at 127.0.0.1:3306 (user root, no password) is not reachable: {exc}")


@pytest.fixture
def mysql_warehouse(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database of its own on the test MariaDB, as the ``abm_smoke_mysql`` connection; dropped after."""
    database = f"abm_smoke_{uuid.uuid4().hex[:10]}"
    with closing(_mariadb_server()) as conn:
        conn.cursor().execute(f"CREATE DATABASE `{database}`")
    monkeypatch.setenv(
        "AIRFLOW_CONN_ABM_SMOKE_MYSQL",
        json.dumps(
            {"conn_type": "mysql", "host": "127.0.0.1", "port": 3306, "login": "root", "schema": database}
        ),
    )
    try:
        yield database
    finally:
        with closing(_mariadb_server()) as conn:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS `{database}`")
