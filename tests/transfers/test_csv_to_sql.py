"""``ExecutionCsvToSqlOperator``'s own arguments: ``dialect_options`` is a mapping, checked at parse
when it is known and once rendered otherwise, and handed to the warehouse's dialect, which names an
option it does not have."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from abm_provider.compat import AirflowFailException
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import TACTIC_COLUMNS, days, download_xcom, tactic_rows, write_csv
from support.warehouses import duckdb_conn_env


def _operator(**kwargs: object) -> ExecutionCsvToSqlOperator:
    return ExecutionCsvToSqlOperator(
        task_id="load", source="/x.csv", sql_conn_id="warehouse", table="tactic_perf", **kwargs
    )


def test_dialect_options_is_templated_and_must_be_a_mapping() -> None:
    assert "dialect_options" in ExecutionCsvToSqlOperator.template_fields
    with pytest.raises(ValueError, match="dialect_options must be a mapping .* got list"):
        _operator(dialect_options=["memory_limit", "1GB"])
    # Rendered without native objects, a template gives text: refused before anything is loaded.
    op = _operator(dialect_options="{{ params.options }}")
    op.dialect_options = "{'memory_limit': '1GB'}"  # type: ignore[assignment]
    with pytest.raises(AirflowFailException, match="dialect_options must be a mapping .* got str"):
        op.execute(context={})


def test_an_option_the_warehouse_lacks_fails_the_task_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", duckdb_conn_env(tmp_path / "wh.duckdb"))
    rows = tactic_rows(days(dt.date(2026, 10, 1), 2), tactics=2, version=1)
    path = write_csv(tmp_path / "exec-1.csv", TACTIC_COLUMNS, rows)
    op = _operator(dialect_options={"memory_limt": "1GB"})
    op.source = download_xcom(path, "exec-1")
    with pytest.raises(AirflowFailException, match="'memory_limt' is not an option of the duckdb dialect"):
        op.execute(context={})
