"""Bad records go to the rejects file with their line, the reason and the raw text; nothing vanishes."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.common.rejects import TooManyRejects, read_rejects
from support.export_files import TACTIC_COLUMNS, download_xcom, expected, tactic_rows
from support.export_files import csv_record as line

GOOD = tactic_rows([dt.date(2026, 10, 1), dt.date(2026, 10, 2), dt.date(2026, 10, 3)], 2, version=1)


def messy_file(path: Path) -> tuple[Path, list[dict[str, str]]]:
    """A file whose every kind of bad record sits on a known line; returns the rows that must load."""
    g = GOOD
    lines = [
        ",".join(TACTIC_COLUMNS),  # line 1
        line(g[0]),  # 2: superseded by line 11 (same key)
        line(g[1], impressions="12x"),  # 3
        line(g[2], date="2026-02-30"),  # 4
        "2026-10-02,c1,short,t1,row,1,2",  # 5: 7 fields
        None,  # 6: not UTF-8 (written below)
        line(g[3], campaign_name="two\nlines"),  # 7-8: good, spans two lines
        line(g[4], tactic_id=""),  # 9: missing key
        line(g[5], spend="1.005"),  # 10
        line(g[0], clicks="7"),  # 11: wins over line 2
        line(dict(g[5], tactic_id="t7")),  # 12
    ]
    data = b""
    for text in lines:
        if text is None:
            data += b"2026-10-03,c0,Caf\xe9 latin-1,t5,x,1,1,1.00\n"
        else:
            data += text.encode("utf-8") + b"\n"
    path.write_bytes(data)
    loaded = [dict(g[3], campaign_name="two\nlines"), dict(g[0], clicks="7"), dict(g[5], tactic_id="t7")]
    return path, loaded


def test_bad_records_are_rejected_with_line_reason_and_raw_text(warehouse, tmp_path):
    path, loaded = messy_file(tmp_path / "messy.csv")

    out = warehouse.operator(source=download_xcom(path, "m1"), max_rejected=10).execute(context={})

    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", loaded)
    assert (out["rows_loaded"], out["rows_rejected"]) == (3, 7)
    rejects = {int(r["line"]): r for r in read_rejects(Path(out["rejects_path"]))}
    assert out["rejects_path"] == str(tmp_path / "messy.csv.rejects.csv")
    assert sorted(rejects) == [2, 3, 4, 5, 6, 9, 10]
    assert "duplicate natural key" in rejects[2]["reason"]
    assert "column impressions: expected an integer" in rejects[3]["reason"]
    assert "12x" in rejects[3]["raw"]
    assert "column date: expected a date" in rejects[4]["reason"]
    assert (
        "malformed record" in rejects[5]["reason"] and rejects[5]["raw"] == "2026-10-02,c1,short,t1,row,1,2"
    )
    assert "malformed record" in rejects[6]["reason"]
    assert "utf-8" in rejects[6]["reason"].lower() or "encoding" in rejects[6]["reason"].lower()
    assert "\\xe9" in rejects[6]["raw"]  # the offending byte stays visible
    assert "missing value in key column tactic_id" in rejects[9]["reason"]
    assert "column spend: expected a decimal" in rejects[10]["reason"]
    assert [r[4] for r in warehouse.ledger_rows()] == [7]


def test_value_errors_only_keep_the_fast_path_and_their_lines(native_warehouse, tmp_path):
    rows = tactic_rows([dt.date(2026, 10, 1)], 4, version=3)
    text = [",".join(TACTIC_COLUMNS), *(line(r) for r in rows[:3]), line(rows[3], clicks="-")]
    path = tmp_path / "values.csv"
    path.write_text("\n".join(text) + "\n", encoding="utf-8")

    out = native_warehouse.operator(source=download_xcom(path, "v1"), max_rejected=0.3).execute(context={})

    assert out["rows_rejected"] == 1 and out["rows_loaded"] == 3
    (reject,) = read_rejects(Path(out["rejects_path"]))
    assert reject["line"] == "5" and "column clicks" in reject["reason"]


def test_past_the_threshold_nothing_is_loaded_and_the_rejects_say_why(warehouse, tmp_path):
    path, _ = messy_file(tmp_path / "messy.csv")
    rejects_path = tmp_path / "out" / "rejected.csv"

    with pytest.raises(TooManyRejects, match=r"7 of 10 records were rejected.*rejected\.csv") as err:
        warehouse.operator(
            source=download_xcom(path, "m1"), max_rejected=6, rejects_path=str(rejects_path)
        ).execute(context={})

    assert isinstance(err.value, AirflowFailException)  # not retried: the same file fails again
    assert "e.g. record 1 (line 2): duplicate natural key" in str(err.value)
    assert str(err.value).endswith("Nothing was loaded.")
    assert not warehouse.exists()
    assert len(read_rejects(rejects_path)) == 7


def test_no_limit_loads_every_record_that_passes(native_warehouse, tmp_path):
    path, loaded = messy_file(tmp_path / "messy.csv")
    out = native_warehouse.operator(source=download_xcom(path, "m1"), max_rejected=None).execute(context={})
    assert (out["rows_loaded"], out["rows_rejected"]) == (3, 7)
    assert native_warehouse.contents() == expected("TACTIC_PERFORMANCE", loaded)


def test_a_fraction_threshold_counts_against_all_records(native_warehouse, tmp_path):
    path, loaded = messy_file(tmp_path / "messy.csv")
    # 7 of 10 records are rejected, the repeated key among them: over half
    share = r"7 of 10 records were rejected \(\d+\.00%\), more than max_rejected=0.5 allows \(50.00%"
    with pytest.raises(TooManyRejects, match=share):
        native_warehouse.operator(source=download_xcom(path, "m1"), max_rejected=0.5).execute(context={})
    out = native_warehouse.operator(source=download_xcom(path, "m1"), max_rejected=0.75).execute(context={})
    assert out["rows_loaded"] == 3


def test_a_clean_reload_removes_a_stale_rejects_file(native_warehouse, tmp_path):
    path, _ = messy_file(tmp_path / "data.csv")
    native_warehouse.operator(source=download_xcom(path, "m1"), max_rejected=10).execute(context={})
    stale = tmp_path / "data.csv.rejects.csv"
    assert stale.exists()
    path.write_text(",".join(TACTIC_COLUMNS) + "\n" + line(GOOD[0]) + "\n", encoding="utf-8")
    out = native_warehouse.operator(source=download_xcom(path, "m2")).execute(context={})
    assert out["rows_rejected"] == 0 and out["rejects_path"] is None and not stale.exists()


@pytest.mark.parametrize("carriage_return", [False, True], ids=["plain", "carriage_return"])
def test_a_quoted_empty_key_is_rejected_on_every_path(warehouse, tmp_path, carriage_return):
    """``""`` in a key column is a missing key, whether the bulk reader or the fallback stages the file.

    Found by the round-trip property test: the bulk readers stage a quoted empty field as '' (not
    NULL), so PostgreSQL's COPY and DuckDB's read_csv loaded a row with an empty tactic_id, while the
    same record in a file that needs the Python fallback (a carriage return anywhere) was rejected.
    """
    name = '"cr\rinside"' if carriage_return else "plain"
    g = GOOD
    fields = [g[1][c] if c != "campaign_name" else "c" for c in TACTIC_COLUMNS]
    fields[TACTIC_COLUMNS.index("tactic_id")] = '""'
    fields[TACTIC_COLUMNS.index("tactic_name")] = name
    text = "\n".join([",".join(TACTIC_COLUMNS), line(g[0]), ",".join(fields)])
    path = tmp_path / "empty_key.csv"
    path.write_bytes((text + "\n").encode("utf-8"))
    assert b',"",' in path.read_bytes()

    out = warehouse.operator(source=download_xcom(path, "ek"), max_rejected=1).execute(context={})

    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", [g[0]])
    (reject,) = read_rejects(Path(out["rejects_path"]))
    assert (int(reject["line"]), reject["reason"]) == (3, "missing value in key column tactic_id")


#: Values at the edges of each rule, and whether the rule accepts them. PostgreSQL decides most rows
#: with a cheaper test than the rule's pattern (``PostgresDialect.passes_sql``); both must agree here.
EDGES = [
    ("impressions", "9" * 18, True),
    ("impressions", "-" + "9" * 18, True),
    ("impressions", "9" * 19, False),
    ("impressions", "--1", False),
    ("impressions", "1-", False),
    ("spend", "9" * 16 + ".99", True),
    ("spend", "-" + "9" * 16 + ".5", True),
    ("spend", "9" * 17, False),
    ("spend", "1.", False),
    ("spend", ".5", False),
    ("spend", "1.2.3", False),
    ("date", "0001-01-01", True),
    ("date", "0000-01-01", False),
    ("date", "2024-02-29", True),
    ("date", "2026-02-29", False),
    ("date", "2026-04-31", False),
    ("date", "2026-12-31", True),
    ("date", "2026-13-01", False),
    ("date", "2026-00-10", False),
    ("date", "2026-01-32", False),
    ("date", "2026-01-00", False),
    ("date", "20260-1-01", False),
]


@pytest.mark.parametrize(("column", "value", "accepted"), EDGES, ids=[f"{c}={v}" for c, v, _ in EDGES])
def test_values_at_the_edge_of_each_rule(native_warehouse, tmp_path, column, value, accepted):
    g = GOOD
    text = "\n".join([",".join(TACTIC_COLUMNS), line(g[0]), line(g[1], **{column: value})]) + "\n"
    path = tmp_path / "edge.csv"
    path.write_text(text, encoding="utf-8")

    out = native_warehouse.operator(source=download_xcom(path, "edge"), max_rejected=1).execute(context={})

    assert out["rows_loaded"] == (2 if accepted else 1)
    if not accepted:
        (reject,) = read_rejects(Path(out["rejects_path"]))
        assert reject["reason"].startswith(f"column {column}: expected"), reject["reason"]


def test_postgres_skips_its_sql_check_when_the_arrow_prescan_vouches(tmp_path, monkeypatch, request, capsys):
    """Into an existing table (staged), a clean file skips the row-by-row SQL check."""
    from support.warehouses import make_warehouse

    warehouse = make_warehouse("postgres", tmp_path, monkeypatch, request)
    first = tactic_rows([dt.date(2026, 9, 30)], 2, version=1)
    seed = tmp_path / "seed.csv"
    seed.write_text("\n".join([",".join(TACTIC_COLUMNS), *(line(r) for r in first)]) + "\n", encoding="utf-8")
    warehouse.operator(source=download_xcom(seed, "p0")).execute(context={})
    capsys.readouterr()

    path = tmp_path / "clean.csv"
    path.write_text("\n".join([",".join(TACTIC_COLUMNS), *(line(r) for r in GOOD)]) + "\n", encoding="utf-8")
    out = warehouse.operator(source=download_xcom(path, "p1")).execute(context={})
    assert out["rows_loaded"] == len(GOOD) and out["rows_rejected"] == 0
    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", [*first, *GOOD])
    assert f"Every one of the {len(GOOD)} records passed the column rules" in capsys.readouterr().out

    messy, _ = messy_file(tmp_path / "messy.csv")
    out = warehouse.operator(source=download_xcom(messy, "p2"), max_rejected=10).execute(context={})
    assert "passed the column rules" not in capsys.readouterr().out and out["rows_rejected"] == 7


def test_repeated_keys_into_a_new_table_are_found_and_counted_against_the_limit(native_warehouse, tmp_path):
    """Into a new table the one-pass load finds the repeated key and steps back; staging sets it aside."""
    rows = tactic_rows([dt.date(2026, 10, 1)], 3, version=1)
    later = dict(rows[0], clicks="99")
    path = tmp_path / "repeats.csv"
    path.write_text("\n".join([",".join(TACTIC_COLUMNS), *(line(r) for r in [*rows, later])]) + "\n")

    with pytest.raises(AirflowFailException, match="1 of 4 records were rejected"):
        native_warehouse.operator(source=download_xcom(path, "d1")).execute(context={})
    assert not native_warehouse.exists()

    out = native_warehouse.operator(source=download_xcom(path, "d1"), max_rejected=1).execute(context={})
    assert (out["rows_loaded"], out["rows_rejected"]) == (3, 1)
    assert native_warehouse.contents() == expected("TACTIC_PERFORMANCE", [later, rows[1], rows[2]])
    (reject,) = read_rejects(Path(out["rejects_path"]))
    assert reject["line"] == "2" and "duplicate natural key" in reject["reason"]


def test_a_remote_source_keeps_its_rejects_under_the_state_dir_not_beside_a_temporary_copy(
    warehouse, tmp_path, monkeypatch
):
    """A remote file is copied to a temporary file to load; its rejects must outlive that copy."""
    from types import SimpleNamespace

    import fsspec
    from airflow.sdk import ObjectStoragePath
    from airflow.sdk.io import attach

    attach("memory", fs=fsspec.filesystem("memory"))  # a remote store that needs no server
    path, loaded = messy_file(tmp_path / "messy.csv")
    remote = ObjectStoragePath(f"memory://exports/{uuid.uuid4().hex}/messy.csv")
    remote.parent.mkdir(parents=True, exist_ok=True)
    remote.write_bytes(path.read_bytes())
    monkeypatch.setenv("AIRFLOW__ABM__STATE_DIR", str(tmp_path / "state"))
    ti = SimpleNamespace(dag_id="exports", task_id="load", run_id="manual__1", try_number=2, map_index=-1)
    source = {**download_xcom(path, "m1"), "path": str(remote)}

    out = warehouse.operator(source=source, max_rejected=10).execute(
        context={"ti": ti, "run_id": "manual__1"}
    )

    assert warehouse.contents() == expected("TACTIC_PERFORMANCE", loaded)
    assert out["rejects_path"] == str(tmp_path / "state/rejects/exports/manual__1/load/try_2.csv")
    assert sorted(int(r["line"]) for r in read_rejects(Path(out["rejects_path"]))) == [2, 3, 4, 5, 6, 9, 10]
