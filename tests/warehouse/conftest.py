"""The loader tests' PostgreSQL fixture (``support.warehouses``), for the tests that need the server."""

from __future__ import annotations

from support.warehouses import pg_schema

__all__ = ["pg_schema"]
