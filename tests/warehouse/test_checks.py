"""``abm_provider.warehouse.checks``, the column checks of a load: a missing or unknown column fails
naming it; ``add_columns`` widens the table."""

from __future__ import annotations

import datetime as dt

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.exceptions import NotAnExport
from support.export_files import TACTIC_COLUMNS, download_xcom, expected, tactic_rows, write_csv

# The fixtures this module uses.
from support.warehouses import native_warehouse, warehouse

__all__ = ["native_warehouse", "warehouse"]

ROWS = tactic_rows([dt.date(2026, 10, 1)], 3, version=1)


def test_a_missing_column_fails_naming_it_before_anything_is_created(warehouse, tmp_path):
    columns = [c for c in TACTIC_COLUMNS if c != "clicks"]
    path = write_csv(tmp_path / "missing.csv", columns, ROWS)
    with pytest.raises(AirflowFailException, match=r"\['clicks'\].*missing from the file"):
        warehouse.operator(source=download_xcom(path, "x1")).execute(context={})
    assert not warehouse.exists()


def test_an_unknown_column_fails_naming_it(warehouse, tmp_path):
    path = write_csv(
        tmp_path / "extra.csv", [*TACTIC_COLUMNS, "video_views"], [dict(r, video_views="5") for r in ROWS]
    )
    with pytest.raises(
        AirflowFailException, match=r"\['video_views'\] are not in export type TACTIC_PERFORMANCE"
    ):
        warehouse.operator(source=download_xcom(path, "x1")).execute(context={})


def test_add_columns_widens_an_existing_table_and_keeps_old_rows(warehouse, tmp_path):
    first = write_csv(tmp_path / "v1.csv", TACTIC_COLUMNS, ROWS)
    warehouse.operator(source=download_xcom(first, "e1")).execute(context={})
    later = tactic_rows([dt.date(2026, 10, 2)], 3, version=2)
    wide = [dict(r, video_views=str(i)) for i, r in enumerate(later)]
    second = write_csv(tmp_path / "v2.csv", ["video_views", *reversed(TACTIC_COLUMNS)], wide)

    with pytest.raises(AirflowFailException, match=r"\['video_views'\] are not in table"):
        warehouse.operator(source=download_xcom(second, "e2")).execute(context={})
    out = warehouse.operator(source=download_xcom(second, "e2"), on_schema_change="add_columns").execute(
        context={}
    )

    assert out["columns_added"] == ["video_views"] and out["rows_loaded"] == 3
    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", ROWS, later)
    views = warehouse.query(f"SELECT date, tactic_id, video_views FROM {warehouse.table} ORDER BY 1, 2")
    assert [(str(d)[:10], t, v) for d, t, v in views] == [
        ("2026-10-01", "t0", None),
        ("2026-10-01", "t1", None),
        ("2026-10-01", "t2", None),
        ("2026-10-02", "t0", "0"),
        ("2026-10-02", "t1", "1"),
        ("2026-10-02", "t2", "2"),
    ]
    # Once added, the column is part of the table: a file without it now misses a column.
    with pytest.raises(AirflowFailException, match=r"\['video_views'\] of table .* missing from the file"):
        warehouse.operator(source=download_xcom(first, "e3")).execute(context={})


def test_header_names_that_are_not_identifiers_are_refused(native_warehouse, tmp_path):
    path = tmp_path / "evil.csv"
    path.write_text('date,"tactic_id; DROP TABLE x",clicks\n', encoding="utf-8")
    # Final (an AirflowFailException): the same file is refused again on every try.
    with pytest.raises(NotAnExport, match=r"not a header of column names \('tactic_id; DROP TABLE x'"):
        native_warehouse.operator(source=download_xcom(path, "x1")).execute(context={})


def test_typed_columns_and_lineage_columns_are_created(native_warehouse, tmp_path):
    path = write_csv(tmp_path / "t.csv", TACTIC_COLUMNS, ROWS)
    native_warehouse.operator(source=download_xcom(path, "e1")).execute(context={})
    types = {c: t.lower() for c, t in native_warehouse.column_facts(native_warehouse.table, "data_type")}
    assert types["date"] == "date"
    assert types["impressions"] == "bigint" and types["clicks"] == "bigint"
    assert types["spend"] in {"numeric", "decimal(18,2)"}
    assert types["tactic_name"] in {"text", "varchar", "character varying"}
    assert list(types)[-2:] == ["_execution_id", "_loaded_at"]
