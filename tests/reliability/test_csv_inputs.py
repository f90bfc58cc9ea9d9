"""Bad-input matrix for CSV content: every broken file either fails naming the fix or rejects the row.

Each case is a file of six good records (two of them spanning two lines) with one kind of trouble
in the middle, loaded by ``ExecutionCsvToSqlOperator`` into DuckDB and into PostgreSQL. The
expectation is written per case: either the load fails with a message naming what to fix and
nothing is created, or the offending records land in the rejects file (line, reason) and every
good record is in the table, with its values intact. ``docs/bad-inputs.md`` has the same table.

Deeper checks of single rules live in ``tests/transfers/test_load_rejects.py`` and
``tests/warehouse/test_checks.py``; this matrix is the one place that lists every input a user may send.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.common.rejects import read_rejects
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import (
    TACTIC_COLUMNS,
    csv_bytes,
    csv_line,
    days,
    download_xcom,
    expected,
    tactic_rows,
)
from support.warehouses import Warehouse

from .badinput_support import duckdb_target, postgres_target

GOOD = tactic_rows(days(dt.date(2026, 10, 1), 3), 2, version=1)
HEADER = csv_bytes([TACTIC_COLUMNS])
TEN_MB = 10 << 20


def row(**changes: str) -> dict[str, str]:
    """A row of a day and tactic no good row uses, with some fields changed."""
    return {**GOOD[0], "date": "2026-10-20", "tactic_id": "t9", **changes}


def record(**changes: str) -> bytes:
    return csv_line(row(**changes))


@dataclass(frozen=True)
class CsvCase:
    """One input: the bytes between the good rows (or a whole file), and what the user must see."""

    key: str
    label: str
    middle: list[bytes] = field(default_factory=list)
    #: Reason fragment for each middle record that must be rejected (``None``: it must load).
    reasons: list[str | None] = field(default_factory=list)
    #: Rows the middle records load as (checked value by value).
    loads: list[dict[str, str]] = field(default_factory=list)
    header: bytes = HEADER
    #: Put the middle records after every good one (a broken quote swallows what follows it).
    at_end: bool = False
    whole_file: bytes | None = None
    error: str | None = None
    #: The exception a failing load raises (``AirflowFailException`` fails without retries).


QUOTED = dict(GOOD[0], date="2026-10-21", campaign_name='a, "b"\nc,\r\nd', tactic_name=",,,")
BIG = dict(GOOD[0], date="2026-10-22", campaign_name="x" * TEN_MB)

CASES = [
    CsvCase(
        "extra_column",
        "a column the export type does not have",
        whole_file=csv_bytes(
            [[*TACTIC_COLUMNS, "video_views"], [GOOD[0][c] for c in TACTIC_COLUMNS] + ["5"]]
        ),
        error="['video_views'] are not in export type TACTIC_PERFORMANCE; "
        "pass on_schema_change='add_columns'",
    ),
    CsvCase(
        "missing_column",
        "a column of the export type is missing",
        whole_file=csv_bytes(
            [[c for c in TACTIC_COLUMNS if c != "spend"], ["2026-10-01", "c", "n", "t", "n", "1", "2"]]
        ),
        error="column(s) ['spend'] of export type TACTIC_PERFORMANCE are missing from the file",
    ),
    CsvCase(
        "extra_field",
        "a record with one field too many",
        [record().rstrip(b"\n") + b",surplus\n"],
        ["wrong number of fields: expected 8, found 9"],
    ),
    CsvCase(
        "missing_field",
        "a record with one field too few",
        [b"2026-10-20,c0,short,t9,row,1,2\n"],
        ["wrong number of fields: expected 8, found 7"],
    ),
    CsvCase(
        "bad_number",
        "a count that is not an integer, a padded count, money with 3 places",
        [
            record(impressions="12x"),
            record(tactic_id="t10", clicks=" 7"),
            record(tactic_id="t11", spend="1.005"),
        ],
        [
            "column impressions: expected an integer, got 12x",
            "column clicks: expected an integer, got  7",
            "column spend: expected a decimal with at most 2 places, got 1.005",
        ],
    ),
    CsvCase(
        "bad_date",
        "an impossible date, a US date, an unpadded date",
        [record(date="2026-02-30"), record(date="10/20/2026"), record(date="2026-1-5")],
        ["column date: expected a date YYYY-MM-DD, got 2026-02-30", "got 10/20/2026", "got 2026-1-5"],
    ),
    CsvCase(
        "empty_key",
        "an empty natural-key value",
        [record(tactic_id="")],
        ["missing value in key column tactic_id"],
    ),
    CsvCase(
        "non_utf8_record",
        "a record in Latin-1 (byte 0xE9)",
        [b"2026-10-20,c0,Caf\xe9,t9,x,1,1,1.00\n"],
        ["not valid UTF-8"],
    ),
    CsvCase(
        "non_utf8_header",
        "a header that is not UTF-8",
        whole_file=b"date,campaign_id,caf\xe9\n",
        error="the header row is not valid UTF-8",
    ),
    CsvCase(
        "nul_byte",
        "a NUL byte inside a value",
        [record(campaign_name="a\x00b")],
        ["contains a NUL byte"],
    ),
    CsvCase(
        "unclosed_quote",
        "a quote that is never closed, in the last record",
        [b'2026-10-20,c0,"never closed,t9,x,1,1,1.00\n'],
        ["malformed record (malformed CSV: unexpected end of data)"],
        at_end=True,
    ),
    CsvCase(
        "quoted_newlines_and_commas",
        "quoted newlines, CRLF, commas and quotes inside values",
        [csv_line(QUOTED)],
        [None],
        [QUOTED],
    ),
    CsvCase(
        "duplicate_key",
        "the same natural key twice in one file",
        [record(clicks="1"), record(clicks="2")],
        ["duplicate natural key (date, tactic_id)", None],
        [row(clicks="2")],
    ),
    CsvCase("bom", "a UTF-8 byte-order mark before the header", header=b"\xef\xbb\xbf" + HEADER),
    CsvCase("crlf", "CRLF line ends throughout", header=HEADER.replace(b"\n", b"\r\n")),
    CsvCase(
        "empty_file",
        "an empty file (0 bytes)",
        whole_file=b"",
        error="the file is empty; expected a header row",
    ),
    CsvCase("header_only", "a header and no records", whole_file=HEADER),
    CsvCase("ten_mb_field", "a 10 MB text field", [csv_line(BIG)], [None], [BIG]),
]


def build(case: CsvCase) -> tuple[bytes, dict[int, str | None], list[dict[str, str]]]:
    """The file's bytes, the first line of each middle record with its reason, and the rows to load."""
    if case.whole_file is not None:
        return case.whole_file, {}, []
    end = "\r\n" if case.header.endswith(b"\r\n") else "\n"
    before, after = (GOOD, []) if case.at_end else (GOOD[:3], GOOD[3:])
    data = case.header + b"".join(csv_line(r, end=end) for r in before)
    lines: dict[int, str | None] = {}
    for raw, reason in zip(case.middle, case.reasons, strict=True):
        lines[data.count(b"\n") + 1] = reason
        data += raw
    return data + b"".join(csv_line(r, end=end) for r in after), lines, [*GOOD, *case.loads]


def _params() -> list[Any]:
    out = []
    for case in CASES:
        for kind in ("duckdb", "postgres"):
            out.append(pytest.param(case, kind, id=f"{case.key}-{kind}"))
    return out


@pytest.mark.parametrize(("case", "kind"), _params())
def test_each_csv_input_fails_naming_the_fix_or_rejects_the_record_and_loads_the_rest(
    case: CsvCase, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any
) -> None:
    target = _target(kind, tmp_path, monkeypatch, request)
    data, lines, loaded = build(case)
    path = tmp_path / f"{case.key}.csv"
    path.write_bytes(data)
    operator = ExecutionCsvToSqlOperator(
        task_id="load", source=download_xcom(path, "e-1"), max_rejected=10, **target.operator_kwargs()
    )

    if case.error is not None:
        with pytest.raises(Exception) as info:
            operator.execute(context={})
        # Retrying the same file cannot help: the task fails without Airflow's retries.
        assert isinstance(info.value, AirflowFailException), repr(info.value)
        assert case.error in str(info.value)
        assert not target.exists() and target.ledger_rows() == []
        return

    out = operator.execute(context={})

    rows = target.rows()
    got = {(r[0], r[3]): r[:-1] for r in rows}
    assert len(got) == len(rows), "duplicate natural keys in the table"
    assert got == expected("TACTIC_PERFORMANCE", loaded), "a good record was lost or changed"
    rejected = {line: reason for line, reason in lines.items() if reason is not None}
    assert (out["rows_loaded"], out["rows_rejected"]) == (len(loaded), len(rejected))
    found = {int(r["line"]): r["reason"] for r in read_rejects(Path(out["rejects_path"]))} if rejected else {}
    assert sorted(found) == sorted(rejected)
    for line, reason in rejected.items():
        assert reason in found[line], (line, found[line])
    ledger = target.ledger_rows()
    assert [(r[0], r[2], r[4]) for r in ledger] == [("e-1", len(loaded), len(rejected))]


def _target(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any) -> Warehouse:
    if kind == "duckdb":
        return duckdb_target(tmp_path / "wh.duckdb", monkeypatch)
    return postgres_target(request.getfixturevalue("pg_schemas")(), monkeypatch)


def test_an_unreadable_header_fails_without_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = duckdb_target(tmp_path / "wh.duckdb", monkeypatch)
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    with pytest.raises(AirflowFailException, match="the file is empty"):
        ExecutionCsvToSqlOperator(
            task_id="load", source=str(path), export_type="TACTIC_PERFORMANCE", **target.operator_kwargs()
        ).execute(context={})


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_a_quote_never_closed_mid_file_keeps_what_it_swallows_in_the_rejects(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any
) -> None:
    """No parser can tell where the quote should have closed: the records after it are read as part
    of it until a later quote happens to re-synchronise the parser.

    Nothing disappears: the records before it load, and every later record is either loaded or
    inside the raw text of a rejected record, from where it can be repaired and loaded again.
    """
    target = _target(kind, tmp_path, monkeypatch, request)
    broken = b'2026-10-20,c0,"never closed,t9,x,1,1,1.00\n'
    head = HEADER + b"".join(csv_line(r) for r in GOOD[:3])
    path = tmp_path / "broken.csv"
    path.write_bytes(head + broken + b"".join(csv_line(r) for r in GOOD[3:]))

    out = ExecutionCsvToSqlOperator(
        task_id="load", source=download_xcom(path, "e-1"), max_rejected=5, **target.operator_kwargs()
    ).execute(context={})

    table = {(r[0], r[3]): r[:-1] for r in target.rows()}
    rejects = read_rejects(Path(out["rejects_path"]))
    raw = "\n".join(r["raw"] for r in rejects)
    assert int(rejects[0]["line"]) == head.count(b"\n") + 1 and "malformed record" in rejects[0]["reason"]
    assert broken.decode().rstrip("\n") in raw
    want = expected("TACTIC_PERFORMANCE", GOOD)
    for good in GOOD:
        key = (good["date"], good["tactic_id"])
        text = csv_line(good).decode().rstrip("\n")
        assert table.get(key) == want[key] or text in raw, f"{key} is neither loaded nor rejected"
    assert all(k in table for k in list(want)[:3]), "a record before the broken one was lost"
    assert out["rows_loaded"] + out["rows_rejected"] == len(rejects) + len(table)


def test_every_case_is_in_the_docs_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "bad-inputs.md").read_text(encoding="utf-8")
    missing = [case.label for case in CASES if f"| {case.label} |" not in doc]
    assert missing == []
    assert f"{len(CASES) + 1} CSV inputs" in doc  # + the mid-file unclosed quote
