"""``abm_provider.warehouse.dialects.mysql``: what MySQL and MariaDB need spelled their own way, built
without a connection: backquoted, exact-comparing, indexed state tables, and ``GET_LOCK`` names that
fit and never change. ``tests/accounts/sync`` and the loader suites run the dialect on MariaDB.
"""

from __future__ import annotations

from abm_provider.accounts.sync.state import StateTables
from abm_provider.warehouse.dialects.mysql import MySQLDialect, _lock_name

TABLES = StateTables.named("abm_sync_", "state")


def test_mysql_state_tables_are_backquoted_exact_and_indexed() -> None:
    members, _plan, rejects, runs, run_log = TABLES.create_sql(MySQLDialect(None))
    assert "`state`.`abm_sync_members`" in members
    assert "`state`.`abm_sync_log`" in run_log
    assert "account_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL" in members
    assert "synced_at DATETIME(6) NOT NULL" in members
    assert "logged_at DATETIME(6) NOT NULL" in run_log
    assert '"' not in members + rejects + runs + run_log
    assert rejects.endswith(", INDEX _abm_key (list_id, row_hash))")


def test_mysql_lock_names_fit_get_lock_and_never_change() -> None:
    key = TABLES.lock_key("list-1")
    assert key == "abm_provider.sync:state.abm_sync_:list:list-1"
    assert len(_lock_name(key)) <= 64
    assert _lock_name(key) == _lock_name(key).lower()
    assert _lock_name(key).startswith("abm_sync:")
    assert _lock_name(key) != _lock_name(TABLES.lock_key("list-2"))
