"""Warehouses for the loader tests: DuckDB file, real PostgreSQL (own schema per test), real MariaDB (own
database per test), and the generic path.

The generic path runs twice: against PostgreSQL (``method="generic"``) and against SQLite through a
minimal common-sql ``DbApiHook`` (the SQLite provider is not installed, and no dialect is registered
for it), so it is exercised on a driver with a different parameter style and no native types.
"""

from __future__ import annotations

from support.warehouses import mariadb_database, native_warehouse, pg_conn, pg_schema, warehouse

__all__ = ["mariadb_database", "native_warehouse", "pg_conn", "pg_schema", "warehouse"]
