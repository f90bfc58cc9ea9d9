"""``abm_provider.warehouse.sql``, the replace step, on every warehouse: restated days replace earlier
figures, re-runs change nothing, a failed load leaves no trace."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from abm_provider.warehouse.flow import WarehouseLoader
from support.export_files import (
    ACCOUNT_COLUMNS,
    TACTIC_COLUMNS,
    account_rows,
    days,
    download_xcom,
    expected,
    tactic_rows,
    write_csv,
)

# The fixtures this module uses.
from support.warehouses import native_warehouse, warehouse

__all__ = ["native_warehouse", "warehouse"]

START = dt.date(2026, 10, 1)


def two_executions(tmp_path: Path) -> tuple[list, list, dict, dict]:
    """Execution N covers 10 days; N+1 restates the last 2 of them (48 hours) and adds 2 new days."""
    first = tactic_rows(days(START, 10), 7, version=1)
    second = tactic_rows(days(START + dt.timedelta(days=8), 4), 7, version=2)
    n = download_xcom(write_csv(tmp_path / "exec-1.csv", TACTIC_COLUMNS, first), "exec-1")
    n1 = download_xcom(write_csv(tmp_path / "exec-2.csv", TACTIC_COLUMNS, second), "exec-2")
    return first, second, n, n1


def test_restated_days_replace_earlier_figures(warehouse, tmp_path):
    first, second, n, n1 = two_executions(tmp_path)

    out1 = warehouse.operator(source=n).execute(context={})
    out2 = warehouse.operator(source=n1).execute(context={})

    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", first, second)
    assert (out1["rows_loaded"], out1["rows_deleted"], out1["rows_rejected"]) == (70, 0, 0)
    # 2 restated days x 7 tactics replaced, 4 days x 7 tactics written.
    assert (out2["rows_loaded"], out2["rows_replaced"], out2["rows_rejected"]) == (28, 14, 0)
    assert (
        out2["execution_id"] == "exec-2" and out2["sha256"] == n1["sha256"] and out2["bytes"] == n1["bytes"]
    )
    assert warehouse.ledger_rows() == [("exec-1", n["sha256"], 70, 0, 0), ("exec-2", n1["sha256"], 28, 14, 0)]
    lineage = warehouse.query(f"SELECT DISTINCT _execution_id FROM {warehouse.table} ORDER BY 1")
    assert [r[0] for r in lineage] == ["exec-1", "exec-2"]


def test_loading_the_same_execution_again_changes_nothing(warehouse, tmp_path, capsys):
    first, second, n, n1 = two_executions(tmp_path)
    warehouse.operator(source=n).execute(context={})
    warehouse.operator(source=n1).execute(context={})
    before = warehouse.query(f"SELECT * FROM {warehouse.table} ORDER BY date, tactic_id")
    ledger_before = warehouse.ledger_rows()

    again = warehouse.operator(source=n1).execute(context={})

    assert again["skipped"] is True and again["rows_loaded"] == 0
    assert "already in" in capsys.readouterr().out  # Airflow's task logger writes to stdout here
    assert warehouse.query(f"SELECT * FROM {warehouse.table} ORDER BY date, tactic_id") == before
    assert warehouse.ledger_rows() == ledger_before

    forced = warehouse.operator(source=n1, force=True).execute(context={})
    assert (forced["skipped"], forced["rows_loaded"], forced["rows_deleted"]) == (False, 28, 28)
    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", first, second)
    assert len(warehouse.ledger_rows()) == 3


def test_a_failure_between_delete_and_insert_leaves_table_and_ledger_unchanged(
    warehouse, tmp_path, monkeypatch
):
    first, second, n, n1 = two_executions(tmp_path)
    warehouse.operator(source=n).execute(context={})
    before = warehouse.contents()
    original = WarehouseLoader.insert_new

    def deleted_then_crash(self, cur, *args, **kwargs):
        raise RuntimeError("injected crash after the delete")

    monkeypatch.setattr(WarehouseLoader, "insert_new", deleted_then_crash)
    with pytest.raises(RuntimeError, match="injected crash"):
        warehouse.operator(source=n1).execute(context={})
    assert warehouse.contents() == before
    assert [r[0] for r in warehouse.ledger_rows()] == ["exec-1"]

    monkeypatch.setattr(WarehouseLoader, "insert_new", original)
    warehouse.operator(source=n1).execute(context={})
    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", first, second)
    assert [r[0] for r in warehouse.ledger_rows()] == ["exec-1", "exec-2"]


def test_account_export_uses_its_three_column_key(native_warehouse, tmp_path):
    first = account_rows(days(START, 3), 2, 4, version=1)
    second = account_rows(days(START + dt.timedelta(days=1), 3), 2, 4, version=2)
    for i, rows in enumerate((first, second), start=1):
        path = write_csv(tmp_path / f"acc-{i}.csv", ACCOUNT_COLUMNS, rows)
        native_warehouse.operator(
            source=download_xcom(path, f"acc-{i}", "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE")
        ).execute(context={})
    kind = "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE"
    assert native_warehouse.contents(kind) == expected(kind, first, second)
    assert len(native_warehouse.contents(kind)) == 4 * 2 * 4


def test_key_columns_override_and_bare_path_source(native_warehouse, tmp_path):
    """With key ``date`` only, a new file replaces whole days, even a tactic it no longer lists."""
    first = tactic_rows(days(START, 2), 1, version=1)  # t0 on both days
    second = [
        dict(r, tactic_id="t9") for r in tactic_rows(days(START + dt.timedelta(days=1), 1), 1, version=2)
    ]
    p1 = write_csv(tmp_path / "k1.csv", TACTIC_COLUMNS, first)
    p2 = write_csv(tmp_path / "k2.csv", TACTIC_COLUMNS, second)
    for i, path in enumerate((p1, p2)):
        out = native_warehouse.operator(
            source=str(path), export_type="TACTIC_PERFORMANCE", key_columns="date", execution_id=f"k{i}"
        ).execute(context={})
    assert out["rows_replaced"] == 1
    table = native_warehouse.contents()
    assert sorted(table) == [("2026-10-01", "t0"), ("2026-10-02", "t9")]
    assert table[("2026-10-02", "t9")] == expected("TACTIC_PERFORMANCE", second)[("2026-10-02", "t9")]
