"""``abm_provider.warehouse.dialects.snowflake`` on fakesnow, through the official ``SnowflakeHook``.

Loads run through ``ExecutionCsvToSqlOperator`` as a DAG's task would; the table is read back with the
Snowflake connector, never through the loader. What fakesnow cannot show (blocking locks between
sessions, exact decimal sums, case-sensitive quoted names) is listed in docs/warehouse-loading.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.snowflake.hooks.snowflake import SnowflakeHook

from abm_provider.common.rejects import read_rejects
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from abm_provider.warehouse.dialects.snowflake import SnowflakeDialect
from support.cloud_warehouses import SnowflakeTarget
from support.export_files import (
    FIRST_EXECUTION,
    NAMES,
    NEWER_EXECUTION,
    TACTIC_COLUMNS,
    csv_record,
    download_xcom,
    expected,
    table_contents,
    write_export,
)

TABLE = "tactic_daily"
FIRST, SECOND = FIRST_EXECUTION, NEWER_EXECUTION


@pytest.fixture
def snowflake(snowflake_connection: SnowflakeTarget) -> Iterator[Any]:
    """A cursor on the test's database, opened by the connector (not by the code under test)."""
    with closing(SnowflakeHook(snowflake_conn_id=snowflake_connection.conn_id).get_conn()) as conn:
        yield conn.cursor()


def load(target: SnowflakeTarget, path: Path, execution: str, **kwargs: Any) -> dict[str, Any]:
    operator = ExecutionCsvToSqlOperator(
        task_id=f"load_{execution}",
        sql_conn_id=target.conn_id,
        table=TABLE,
        source=download_xcom(path, execution),
        **kwargs,
    )
    result: dict[str, Any] = operator.execute(context={})
    return result


def test_a_newer_execution_replaces_the_restated_days_and_a_rerun_changes_nothing(
    snowflake_connection: SnowflakeTarget, snowflake: Any, tmp_path: Path
) -> None:
    first = load(snowflake_connection, write_export(tmp_path / "first.csv", FIRST), "exec-1")
    assert (first["rows_loaded"], first["rows_replaced"], first["method"]) == (
        len(FIRST),
        0,
        "snowflake_copy",
    )

    second = load(snowflake_connection, write_export(tmp_path / "second.csv", SECOND), "exec-2")
    restated = [r for r in FIRST if r["date"] >= "2026-10-02"]
    assert (second["rows_loaded"], second["rows_replaced"]) == (len(SECOND), len(restated))
    want = expected("TACTIC_PERFORMANCE", FIRST, SECOND)
    assert table_contents(snowflake, TABLE, "TACTIC_PERFORMANCE") == want

    again = load(snowflake_connection, tmp_path / "second.csv", "exec-2")
    assert again["skipped"] is True
    assert table_contents(snowflake, TABLE, "TACTIC_PERFORMANCE") == want
    snowflake.execute(
        "SELECT execution_id, rows_loaded, rows_deleted, method FROM abm_load_ledger ORDER BY loaded_at"
    )
    assert snowflake.fetchall() == [
        ("exec-1", len(FIRST), 0, "snowflake_copy"),
        ("exec-2", len(SECOND), len(restated), "snowflake_copy"),
    ]


def test_names_are_folded_to_upper_case_and_typed_as_snowflake_types(
    snowflake_connection: SnowflakeTarget, snowflake: Any, tmp_path: Path
) -> None:
    load(snowflake_connection, write_export(tmp_path / "first.csv", FIRST[:2]), "exec-1")
    snowflake.execute(
        "SELECT column_name, data_type, numeric_precision, numeric_scale FROM information_schema.columns "
        "WHERE table_name = 'TACTIC_DAILY' ORDER BY ordinal_position"
    )
    columns = {row[0]: row[1:] for row in snowflake.fetchall()}
    assert list(columns) == [c.upper() for c in TACTIC_COLUMNS] + ["_EXECUTION_ID", "_LOADED_AT"]
    assert columns["SPEND"] == ("NUMBER", 18, 2)
    assert columns["DATE"][0] == "DATE"
    assert columns["_LOADED_AT"][0] == "TIMESTAMP_NTZ"
    # Found by SQL written without quotes, as a warehouse user writes it.
    snowflake.execute("SELECT campaign_name FROM tactic_daily ORDER BY tactic_id")
    assert [row[0] for row in snowflake.fetchall()] == [NAMES[0], NAMES[1]]


def test_text_is_staged_exactly_as_written(
    snowflake_connection: SnowflakeTarget, snowflake: Any, tmp_path: Path
) -> None:
    """A CSV reader that guesses types would make ``007`` a number and lose its zeros."""
    row = dict(FIRST[0], campaign_id="007", tactic_name="12.50")
    load(snowflake_connection, write_export(tmp_path / "text.csv", [row]), "exec-1")
    snowflake.execute("SELECT campaign_id, tactic_name FROM tactic_daily")
    assert snowflake.fetchall() == [("007", "12.50")]


def test_bad_values_malformed_records_and_repeated_keys_are_set_aside_with_their_lines(
    snowflake_connection: SnowflakeTarget, snowflake: Any, tmp_path: Path
) -> None:
    good = FIRST[:3]
    lines = [
        *(csv_record(r) for r in good),
        csv_record(FIRST[3], clicks="12x"),  # record 4: a bad integer
        "2026-10-01,c1,short,t1,row,1,2",  # record 5: too few fields
        csv_record(FIRST[4], date="2026-02-30"),  # record 6: no such day
        csv_record(FIRST[0], spend="1.00"),  # record 7: repeats record 1's key, and wins
    ]
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([",".join(TACTIC_COLUMNS), *lines]) + "\n", encoding="utf-8")

    out = load(snowflake_connection, path, "exec-1", max_rejected=4)

    rejects = {int(r["record"]): r["reason"] for r in read_rejects(Path(out["rejects_path"]))}
    assert sorted(rejects) == [1, 4, 5, 6]
    assert rejects[1].startswith("duplicate natural key")
    assert rejects[4].startswith("column clicks: expected")
    assert rejects[5].startswith("malformed record")
    assert rejects[6].startswith("column date: expected")
    want = expected("TACTIC_PERFORMANCE", good, [dict(FIRST[0], spend="1.00")])
    assert table_contents(snowflake, TABLE, "TACTIC_PERFORMANCE") == want


def test_a_new_column_is_added_and_the_older_rows_keep_null(
    snowflake_connection: SnowflakeTarget, snowflake: Any, tmp_path: Path
) -> None:
    load(snowflake_connection, write_export(tmp_path / "first.csv", FIRST[:2]), "exec-1")
    snowflake.execute("ALTER TABLE tactic_daily DROP COLUMN clicks")
    out = load(
        snowflake_connection,
        write_export(tmp_path / "second.csv", SECOND[:2]),
        "exec-2",
        on_schema_change="add_columns",
    )
    assert out["columns_added"] == ["clicks"]
    snowflake.execute("SELECT COUNT(*), COUNT(clicks) FROM tactic_daily")
    assert snowflake.fetchone() == (len(FIRST[:2]) + len(SECOND[:2]), len(SECOND[:2]))


def test_a_pattern_is_written_without_backslashes_or_left_to_python() -> None:
    """Snowflake reads a backslash in a string literal as an escape, which would change a pattern:
    the decimal point goes as a class, and a pattern with another escape is checked in Python."""
    dialect = SnowflakeDialect(None)
    assert (
        dialect.matches_sql("x", r"-?[0-9]{1,16}(\.[0-9]{1,2})?")
        == "REGEXP_LIKE(x, '-?[0-9]{1,16}([.][0-9]{1,2})?')"
    )
    assert dialect.matches_sql("x", r"[^\x00-\x1f]*") is None
