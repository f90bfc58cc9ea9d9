"""``abm_provider.warehouse.dialects``, the dialect registry (through ``abm_provider.warehouse``'s
``dialect_of`` and ``loader_for``): each hook gets its warehouse's dialect, and any other hook the
generic one.

A connection type no dialect is registered for (SQLite here, through a bare common-sql hook) loads
through the generic path, quoting identifiers as the hook's ``escape_word_format`` says.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from abm_provider.warehouse import dialect_of, loader_for
from support.export_files import TACTIC_COLUMNS, days, download_xcom, tactic_rows, write_csv
from support.warehouses import SqliteTestHook, Warehouse, duckdb_conn_env, mysql_conn_env, postgres_conn_env


def test_each_hook_gets_its_dialect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.duckdb.hooks.duckdb import DuckDBHook
    from airflow.providers.mysql.hooks.mysql import MySqlHook
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    monkeypatch.setenv("AIRFLOW_CONN_WH_DUCKDB", duckdb_conn_env(tmp_path / "wh.duckdb"))
    monkeypatch.setenv("AIRFLOW_CONN_WH_PG", postgres_conn_env())
    monkeypatch.setenv("AIRFLOW_CONN_WH_MYSQL", mysql_conn_env())
    assert dialect_of(DuckDBHook(duckdb_conn_id="wh_duckdb")) == "duckdb"
    assert dialect_of(PostgresHook(postgres_conn_id="wh_pg")) == "postgres"
    assert dialect_of(MySqlHook(mysql_conn_id="wh_mysql")) == "mysql"
    assert dialect_of(SqliteTestHook(tmp_path / "x.sqlite")) == "generic"
    assert loader_for(MySqlHook(mysql_conn_id="wh_mysql")).dialect.quote("a") == "`a`"
    # The list sync plans a SQL source in the warehouse where the rules run there: on all three.
    hooks = [
        DuckDBHook(duckdb_conn_id="wh_duckdb"),
        PostgresHook(postgres_conn_id="wh_pg"),
        MySqlHook(mysql_conn_id="wh_mysql"),
    ]
    assert all(loader_for(hook).dialect.has_rules_in_sql for hook in hooks)
    assert not loader_for(SqliteTestHook(tmp_path / "x.sqlite")).dialect.has_rules_in_sql


class BracketQuotingHook(SqliteTestHook):
    """SQLite also quotes identifiers in brackets: a driver whose dialect quotes otherwise than ``"``."""

    @property
    def escape_word_format(self) -> str:
        return "[{}]"


def test_an_unknown_dialect_loads_through_the_generic_path_quoting_as_its_hook_says(tmp_path: Path) -> None:
    hook = BracketQuotingHook(tmp_path / "wh.sqlite")
    loader = loader_for(hook)
    assert (loader.method, loader.dialect.quote("date")) == ("generic_executemany", "[date]")
    rows = tactic_rows(days(dt.date(2026, 10, 1), 3), tactics=2, version=1)
    path = write_csv(tmp_path / "exec-1.csv", TACTIC_COLUMNS, rows)
    op = ExecutionCsvToSqlOperator(
        task_id="load", sql_conn_id="unused", table="tactic_perf", source=download_xcom(path, "exec-1")
    )
    op.get_db_hook = lambda: hook  # type: ignore[method-assign]

    out = op.execute(context={})

    assert (out["method"], out["rows_loaded"]) == ("generic_executemany", len(rows))
    assert Warehouse("sqlite", "unused", tmp_path / "wh.sqlite").count("tactic_perf") == len(rows)
