"""``abm_provider.warehouse.dialects.generic``: any other common-sql ``DbApiHook``, loaded by ``executemany``.

Driven through ``ExecutionCsvToSqlOperator`` as a DAG uses it, on SQLite (a driver with ``?``
markers and no DECIMAL or DATE types, through a minimal ``DbApiHook``) and on PostgreSQL with
``method="generic"`` (a database that aborts a transaction on any error). What is checked is what
the generic path alone does: it is the path of a hook this package does not know, it reads the file
in chunks without changing the outcome, it works on a database that aborts on a failed probe, and a
table it creates gets a unique index on the natural key. The outcomes every warehouse shares
(replacing restated days, rejects, the ledger) are in ``tests/transfers``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from abm_provider.common.rejects import read_rejects
from support.export_files import csv_line, days, download_xcom, expected, tactic_rows, write_export
from support.warehouses import Warehouse, make_warehouse

ROWS = tactic_rows(days(dt.date(2026, 10, 1), 3), 3, version=1)
TP = "TACTIC_PERFORMANCE"


def sqlite(tmp_path: Path, name: str = "wh", method: str = "generic") -> Warehouse:
    return Warehouse("sqlite", f"{name}_sqlite", tmp_path / f"{name}.sqlite", method=method)


def export(path: Path, rows: list[dict[str, str]]) -> dict[str, Any]:
    return download_xcom(write_export(path, rows), path.stem)


def test_a_hook_of_an_unknown_dialect_is_loaded_by_the_generic_path(tmp_path: Path) -> None:
    warehouse = sqlite(tmp_path, method="auto")
    out = warehouse.operator(source=export(tmp_path / "e1.csv", ROWS)).execute(context={})
    assert out["method"] == "generic_executemany"
    assert (out["rows_loaded"], out["rows_rejected"]) == (len(ROWS), 0)
    assert warehouse.contents() == expected(TP, ROWS)
    assert warehouse.ledger_rows() == [("e1", out["sha256"], len(ROWS), 0, 0)]


def test_a_load_without_a_table_lock_says_so_in_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The generic dialect has no lock that keeps two loads of a table apart: it declares it, and the
    load's log tells the reader what to do instead of taking nothing in silence."""
    warehouse = sqlite(tmp_path)
    capsys.readouterr()
    warehouse.operator(source=export(tmp_path / "e1.csv", ROWS)).execute(context={})
    assert "The generic dialect has no lock that keeps two loads of" in capsys.readouterr().out


def test_native_is_refused_for_a_hook_without_a_bulk_path(tmp_path: Path) -> None:
    warehouse = sqlite(tmp_path, method="native")
    with pytest.raises(
        Exception, match="SqliteTestHook has no native bulk path; use method='generic' or 'auto'"
    ):
        warehouse.operator(source=export(tmp_path / "e1.csv", ROWS)).execute(context={})
    assert not warehouse.exists()


def test_chunks_of_any_size_give_the_same_table_and_the_same_rejects(tmp_path: Path) -> None:
    """Records and rejects on both sides of every chunk boundary: nothing lost, lines still right."""
    bad = [
        csv_line(ROWS[0], tactic_id="t7", impressions="12x"),
        csv_line(ROWS[1], tactic_id=""),
        b"2026-10-02,c1,short,t1,row,1,2\n",
        csv_line(ROWS[2], tactic_id="t8", date="2026-02-30"),
    ]
    records: list[dict[str, str] | bytes] = []
    for i, row in enumerate(ROWS):
        records += [row, bad[i // 2]] if i % 2 == 0 and i // 2 < len(bad) else [row]
    outcomes = []
    for chunk_rows in (1, 2, 3, 10_000):
        path = write_export(tmp_path / f"chunks-{chunk_rows}.csv", records)
        warehouse = sqlite(tmp_path, f"chunks_{chunk_rows}")
        out = warehouse.operator(
            source=download_xcom(path, "e1"), chunk_rows=chunk_rows, max_rejected=len(bad)
        ).execute(context={})
        rejects = [(r["line"], r["reason"]) for r in read_rejects(Path(out["rejects_path"]))]
        outcomes.append((out["rows_loaded"], warehouse.contents(), rejects))
    assert outcomes[0][0] == len(ROWS) and outcomes[0][1] == expected(TP, ROWS)
    assert len(outcomes[0][2]) == len(bad)
    assert all(outcome == outcomes[0] for outcome in outcomes[1:])


def test_a_database_that_aborts_on_error_loads_a_new_table_then_replaces_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any
) -> None:
    """PostgreSQL aborts a transaction at the first error: probing the missing table must not."""
    warehouse = make_warehouse("postgres_generic", tmp_path, monkeypatch, request)
    first = tactic_rows(days(dt.date(2026, 10, 1), 3), 2, version=1)
    second = tactic_rows(days(dt.date(2026, 10, 3), 2), 2, version=2)
    out = warehouse.operator(source=export(tmp_path / "e1.csv", first)).execute(context={})
    assert out["method"] == "generic_executemany" and out["rows_loaded"] == len(first)
    out = warehouse.operator(source=export(tmp_path / "e2.csv", second)).execute(context={})
    assert (out["rows_loaded"], out["rows_replaced"]) == (len(second), 2)
    assert warehouse.contents() == expected(TP, first, second)


def test_a_new_table_gets_its_unique_key_index_with_the_first_load(tmp_path: Path) -> None:
    """Generic databases: built after the insert (one sort, not row by row), it guards the natural key.

    PostgreSQL and DuckDB build none: their load's lock keeps one row per key (issue 18).
    """
    warehouse = sqlite(tmp_path)
    warehouse.operator(source=export(tmp_path / "i1.csv", ROWS)).execute(context={})

    first = ROWS[0]
    with pytest.raises(Exception, match="(?i)unique"):
        warehouse.query(
            f"INSERT INTO {warehouse.table} (date, tactic_id) "
            f"VALUES ('{first['date']}', '{first['tactic_id']}')"
        )


def test_a_hook_may_name_the_standard_types_its_database_spells_otherwise() -> None:
    from abm_provider.warehouse.dialects.generic import GenericDialect

    class Hook:
        placeholder = "?"
        sql_type_names = {"text": "STRING", "DECIMAL": "NUMERIC"}

    d = GenericDialect(Hook())
    assert (d.type_sql("TEXT"), d.type_sql("DECIMAL(18,2)"), d.type_sql("BIGINT")) == (
        "STRING",
        "NUMERIC(18,2)",
        "BIGINT",
    )
    assert d.cast_sql("?", "TEXT") == "CAST(? AS STRING)"
    plain = GenericDialect(object())  # no names given: standard SQL
    assert (plain.type_sql("TEXT"), plain.text_sql(8)) == ("TEXT", "VARCHAR(8)")
