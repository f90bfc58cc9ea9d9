"""One rejects format and one limit for every operator: the list operators and the loader side by side.

The same ten records, three of them bad at the same places, go once through the add operator (a CSV
of accounts, against the emulator) and once through the loader (an export CSV, into DuckDB). Both
must write the same columns with the same line and record numbers, and a given ``max_rejected``
must pass or fail both alike: an int is a count, a float a share of all records, ``None`` no limit.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.common.rejects import REJECTS_HEADER, TooManyRejects
from abm_provider.operators.account_lists import (
    AddAccountsToListOperator,
    CreateAccountListFolderOperator,
    CreateAccountListOperator,
)
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import TACTIC_COLUMNS, csv_bytes, csv_line, days, download_xcom, tactic_rows

from .badinput_support import duckdb_target

RECORDS = 10
BAD = (2, 5, 9)  # record numbers; record 1 spans two lines, so these start on lines 4, 7 and 11


def _header_and_rows(path: str | Path) -> tuple[tuple[str, ...], list[dict[str, str]]]:
    """Read with the standard library, so the provider's own reader is not what is checked."""
    with open(str(path).removeprefix("file://"), newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    return tuple(reader.fieldnames or ()), rows


@pytest.fixture
def accounts_file(tmp_path: Path) -> Path:
    rows = [["id", "name"]]
    for number in range(1, RECORDS + 1):
        name = "two\nlines" if number == 1 else f"Account {number}"
        rows.append(["" if number in BAD else f"001{number:012d}AAA", name])
    path = tmp_path / "accounts.csv"
    path.write_bytes(csv_bytes(rows))
    return path


@pytest.fixture
def export_file(tmp_path: Path) -> Path:
    rows = tactic_rows(days(dt.date(2026, 10, 1), 5), 2, version=1)
    assert len(rows) == RECORDS
    data = csv_bytes([TACTIC_COLUMNS])
    for number, row in enumerate(rows, start=1):
        plain = dict(row, campaign_name="two\nlines" if number == 1 else "plain", tactic_name="plain")
        data += csv_line(dict(plain, impressions="many") if number in BAD else plain)
    path = tmp_path / "export.csv"
    path.write_bytes(data)
    return path


@pytest.fixture
def list_id(abm: Any, context: dict[str, Any]) -> str:
    folder = CreateAccountListFolderOperator(task_id="f", folder_name="contract").execute(context)
    return CreateAccountListOperator(task_id="l", list_name="contract", folder_id=folder["folderId"]).execute(
        context
    )["listId"]


def _add(
    list_id: str, accounts: Path, rejects: Path, context: dict[str, Any], **kwargs: Any
) -> dict[str, Any]:
    op = AddAccountsToListOperator(
        task_id="add", list_id=list_id, accounts_path=str(accounts), rejects_path=str(rejects), **kwargs
    )
    return op.execute(context)


def _load(export: Path, rejects: Path, tmp_path: Path, monkeypatch: Any, **kwargs: Any) -> dict[str, Any]:
    target = duckdb_target(tmp_path / "wh.duckdb", monkeypatch)
    op = ExecutionCsvToSqlOperator(
        task_id="load",
        source=download_xcom(export, "contract"),
        rejects_path=str(rejects),
        force=True,
        **target.operator_kwargs(),
        **kwargs,
    )
    return op.execute(context={})


def test_both_write_the_same_columns_lines_and_records(
    list_id, accounts_file, export_file, context, tmp_path, monkeypatch
):
    listed = _add(list_id, accounts_file, tmp_path / "list.rejects.csv", context, max_rejected=None)
    loaded = _load(export_file, tmp_path / "load.rejects.csv", tmp_path, monkeypatch, max_rejected=None)
    assert listed["rejected"] == loaded["rows_rejected"] == len(BAD)

    list_header, list_rows = _header_and_rows(listed["rejects_path"])
    load_header, load_rows = _header_and_rows(loaded["rejects_path"])
    assert list_header == load_header == REJECTS_HEADER == ("line", "record", "reason", "raw")
    where = [(str(n + 2), str(n)) for n in BAD]
    assert [(r["line"], r["record"]) for r in list_rows] == where
    assert [(r["line"], r["record"]) for r in load_rows] == where
    # raw: the account row as JSON with its values as read; the export record as its text
    assert json.loads(list_rows[0]["raw"]) == {"id": "", "name": "Account 2"}
    assert load_rows[0]["raw"].split(",")[TACTIC_COLUMNS.index("impressions")] == "many"


@pytest.mark.parametrize(
    ("max_rejected", "fails"),
    [(0, True), (2, True), (3, False), (0.25, True), (0.3, False), (0.0, True), (None, False)],
)
def test_the_same_max_rejected_passes_or_fails_both(
    list_id, accounts_file, export_file, context, tmp_path, monkeypatch, max_rejected, fails
):
    outcomes: dict[str, str] = {}
    runs = {
        "list": lambda: _add(list_id, accounts_file, tmp_path / "l.csv", context, max_rejected=max_rejected),
        "load": lambda: _load(
            export_file, tmp_path / "w.csv", tmp_path, monkeypatch, max_rejected=max_rejected
        ),
    }
    for name, run in runs.items():
        try:
            run()
        except TooManyRejects as err:
            assert isinstance(err, AirflowFailException)
            outcomes[name] = str(err)
        else:
            outcomes[name] = "passed"
    if not fails:
        assert outcomes == {"list": "passed", "load": "passed"}
        return
    allowed = f"more than max_rejected={max_rejected!r} allows"
    assert allowed in outcomes["list"] and allowed in outcomes["load"], outcomes
    if isinstance(max_rejected, float):  # a share is decided on all records, by both
        assert outcomes["list"].startswith("3 of 10 records were rejected (30.00%)")
        assert outcomes["load"].startswith("3 of 10 records were rejected (30.00%)")
