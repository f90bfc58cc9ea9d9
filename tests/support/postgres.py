"""The test PostgreSQL at 127.0.0.1:5432 (user ``postgres``), and a database of a suite's own on it.

A suite that creates and drops tables of the same names as another suite (the crash tests, the DAG
tests, the list-sync tests) works in a database of its own, created on first use, so suites running
at the same time never touch each other's tables.
"""

from __future__ import annotations

import json

#: The database the loader tests use (each test in a schema of its own).
TEST_DATABASE = "test"


def dsn(database: str = TEST_DATABASE) -> str:
    """A libpq connection string for ``database`` on the test server."""
    return f"host=127.0.0.1 port=5432 user=postgres dbname={database} connect_timeout=3"


def conn_env(database: str = TEST_DATABASE) -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON) for a ``postgres`` connection to ``database``."""
    return json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": 5432, "login": "postgres", "schema": database}
    )


def unusable(database: str = TEST_DATABASE, *, create: bool = False) -> str | None:
    """``None`` when ``database`` answers (created first if ``create`` and it is missing), else why not."""
    try:
        import psycopg

        if create:
            with psycopg.connect(dsn("postgres"), autocommit=True) as conn:
                found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
                if found is None:
                    conn.execute(f'CREATE DATABASE "{database}"')
        with psycopg.connect(dsn(database)):
            return None
    except Exception as exc:
        return f"PostgreSQL at 127.0.0.1:5432 (database {database}, user postgres) is unusable: {exc}"
