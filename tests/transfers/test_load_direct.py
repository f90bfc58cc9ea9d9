"""A first load into a table that does not exist yet: one pass when the file is clean, else the stage.

The one-pass load writes the rows once, straight into the new table. It may only be kept when it
gives exactly what the staged flow gives, so each kind of record that makes it step back is loaded
here and compared with the staged outcome: same rows, same rejects with the same lines, nothing of
the abandoned attempt left behind.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

import pytest

from abm_provider.common.rejects import read_rejects
from support.export_files import TACTIC_COLUMNS, csv_record, download_xcom, expected, tactic_rows

ROWS = tactic_rows([dt.date(2026, 10, 1), dt.date(2026, 10, 2)], 3, version=1)
STRAIGHT = "straight into the new table"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join([",".join(TACTIC_COLUMNS), *lines]) + "\n", encoding="utf-8")
    return path


def test_a_clean_first_load_is_written_once_with_its_lineage(native_warehouse, tmp_path, capsys):
    stale = tmp_path / "clean.csv.rejects.csv"
    stale.write_text("left by an earlier run\n")
    path = write(tmp_path / "clean.csv", [csv_record(r) for r in ROWS])

    out = native_warehouse.operator(source=download_xcom(path, "exec-1")).execute(context={})

    assert STRAIGHT in capsys.readouterr().out
    assert (out["rows_loaded"], out["rows_replaced"], out["rows_rejected"]) == (len(ROWS), 0, 0)
    assert native_warehouse.contents() == expected("TACTIC_PERFORMANCE", ROWS)
    lineage = native_warehouse.query(
        f"SELECT DISTINCT _execution_id, CAST(_loaded_at AS TEXT) FROM {native_warehouse.table}"
    )
    ledger = native_warehouse.query(f"SELECT CAST(loaded_at AS TEXT) FROM {native_warehouse.ledger}")
    assert lineage == [("exec-1", ledger[0][0])]
    assert native_warehouse.ledger_rows()[0][2:] == (len(ROWS), 0, 0)
    assert not stale.exists(), "a clean load leaves no rejects file from an earlier run"


def test_the_lineage_defaults_used_for_the_copy_do_not_stay_on_the_table(tmp_path, monkeypatch, request):
    from support.warehouses import make_warehouse

    warehouse = make_warehouse("postgres", tmp_path, monkeypatch, request)
    path = write(tmp_path / "clean.csv", [csv_record(r) for r in ROWS])
    warehouse.operator(source=download_xcom(path, "it's-1")).execute(context={})  # a quote, for the literal

    defaults = warehouse.column_facts(warehouse.table, "column_default")
    assert [(column, default) for column, default in defaults if default is not None] == []
    assert warehouse.query(f"SELECT DISTINCT _execution_id FROM {warehouse.table}") == [("it's-1",)]


# Each file holds ROWS plus one record the one-pass load cannot keep; (line, reason start) of its reject.
FALLBACKS = {
    # The typed read (PostgreSQL COPY, DuckDB TRY_CAST) refuses it, and so do the rules.
    "bad_integer": (csv_record(ROWS[0], tactic_id="t9", impressions="12x"), "column impressions: expected"),
    # PostgreSQL's typed COPY would round it into DECIMAL(18,2); the rules refuse it.
    "three_decimals": (csv_record(ROWS[0], tactic_id="t9", spend="1.005"), "column spend: expected"),
    # PostgreSQL's COPY would accept the padded integer; the rules refuse it.
    "padded_integer": (csv_record(ROWS[0], tactic_id="t9", clicks=" 7"), "column clicks: expected"),
    # Nothing wrong with the values: the key repeats an earlier record, which is then set aside.
    "repeated_key": (csv_record(ROWS[0], clicks="99"), "duplicate natural key"),
    # A record neither reader can split.
    "short_record": ("2026-10-02,c1,short,t1,row,1,2", "malformed record"),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_a_first_load_that_needs_the_stage_gives_the_staged_outcome(native_warehouse, tmp_path, capsys, case):
    extra, reason = FALLBACKS[case]
    path = write(tmp_path / f"{case}.csv", [*(csv_record(r) for r in ROWS), extra])

    out = native_warehouse.operator(source=download_xcom(path, "exec-1"), max_rejected=1).execute(context={})

    logged = capsys.readouterr().out
    assert STRAIGHT not in logged and "staging it" in logged
    (reject,) = read_rejects(Path(out["rejects_path"]))
    assert reject["reason"].startswith(reason), reject["reason"]
    if case == "repeated_key":  # the later record wins; the earlier one (line 2) is the reject
        assert reject["line"] == "2"
        want = [dict(ROWS[0], clicks="99"), *ROWS[1:]]
    else:
        assert reject["line"] == str(len(ROWS) + 2)
        want = ROWS
    assert (out["rows_loaded"], out["rows_rejected"]) == (len(want), 1)
    assert native_warehouse.contents() == expected("TACTIC_PERFORMANCE", want)
    assert native_warehouse.count() == len(want)
    assert native_warehouse.ledger_rows() == [("exec-1", out["sha256"], len(want), 0, 1)]


def test_duckdb_reads_a_file_with_carriage_returns_once_for_its_byte_check(tmp_path, monkeypatch, request):
    """The one-pass attempt steps back at a carriage return; staging reuses that scan, not a second read."""
    import abm_provider.warehouse.stream as incoming_file
    from support.warehouses import make_warehouse

    warehouse = make_warehouse("duckdb", tmp_path, monkeypatch, request)
    scans: list[Path] = []
    real = incoming_file.awkward_bytes

    def counted(path: Path, also: Mapping[bytes, str] | None = None) -> str | None:
        scans.append(path)
        return real(path, also)

    monkeypatch.setattr(incoming_file, "awkward_bytes", counted)
    path = tmp_path / "crlf.csv"
    lines = [",".join(TACTIC_COLUMNS), *(csv_record(r) for r in ROWS)]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())

    out = warehouse.operator(source=download_xcom(path, "exec-1")).execute(context={})

    assert out["rows_loaded"] == len(ROWS)
    assert scans == [path]
