"""Fixtures for the export tests: ``dag.test()`` runs (``abm``, ``context``: ``tests/conftest.py``)."""

from __future__ import annotations

from support.dag_runs import run_dag

__all__ = ["run_dag"]
