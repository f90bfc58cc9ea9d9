"""Warehouses for the loader tests: DuckDB file, real PostgreSQL (own schema per test), and the generic path.

The generic path runs twice: against PostgreSQL (``method="generic"``) and against SQLite through a
minimal common-sql ``DbApiHook`` (the SQLite provider is not installed), so it is exercised on a
driver with a different parameter style and no native types (see ``support.warehouses``).
"""

from __future__ import annotations

from support.warehouses import native_warehouse, pg_conn, pg_schema, warehouse

__all__ = ["native_warehouse", "pg_conn", "pg_schema", "warehouse"]
