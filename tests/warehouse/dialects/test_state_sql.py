"""What the list sync's state tables ask of each dialect: quoting, exact-comparing text, times, indexes.

The SQL is built without a connection here; ``tests/accounts/sync`` runs it on each database.
"""

from __future__ import annotations

import pytest

from abm_provider.accounts.sync.state import StateTables
from abm_provider.warehouse.dialects.base import Dialect
from abm_provider.warehouse.dialects.duckdb import DuckDBDialect
from abm_provider.warehouse.dialects.mysql import MySQLDialect
from abm_provider.warehouse.dialects.postgres import PostgresDialect

TABLES = StateTables.named("abm_sync_", "state")


@pytest.mark.parametrize("dialect", [PostgresDialect(None), DuckDBDialect(None)], ids=["postgres", "duckdb"])
def test_standard_state_tables_keep_their_portable_types(dialect: Dialect) -> None:
    members, _plan, rejects, _runs, run_log = TABLES.create_sql(dialect)
    assert members.startswith('CREATE TABLE IF NOT EXISTS "state"."abm_sync_members" (')
    assert run_log.startswith('CREATE TABLE IF NOT EXISTS "state"."abm_sync_log" (')
    assert "account_id VARCHAR(255) NOT NULL" in members
    assert "synced_at TIMESTAMP NOT NULL" in members
    assert "INDEX" not in rejects  # a planner that hashes needs none


@pytest.mark.parametrize(
    ("dialect", "keyed"),
    [(PostgresDialect(None), True), (MySQLDialect(None), True), (DuckDBDialect(None), False)],
    ids=["postgres", "mysql", "duckdb"],
)
def test_the_tables_that_grow_with_a_list_are_keyed_except_on_duckdb(dialect: Dialect, keyed: bool) -> None:
    """On DuckDB a key is an ART index that a bounded memory_limit must hold to change a row."""
    members, plan, _rejects, runs, _log = TABLES.create_sql(dialect)
    assert ("PRIMARY KEY (list_id, account_id, crm_org_id)" in members) is keyed
    assert ("PRIMARY KEY (list_id, run_id, action, seq)" in plan) is keyed
    assert "PRIMARY KEY (list_id, run_id)" in runs  # one row per run: small, and keyed everywhere
