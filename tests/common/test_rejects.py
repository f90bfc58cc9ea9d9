"""The one rejects format and limit API (``abm_provider.common.rejects``), and the operators' use of it.

No emulator and no warehouse here: the writer, the reader, the limit check and the constructors of
every operator that takes a limit. ``tests/reliability/test_rejects_contract.py`` runs the list
operators and the loader side by side on the same limits.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import ObjectStoragePath
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.common.rejects import (
    REJECTS_HEADER,
    RejectsWriter,
    TooManyRejects,
    check_limit,
    check_rejects,
    describe_reject,
    raw_json,
    read_rejects,
    rejects_location,
)
from abm_provider.operators.account_lists import AddAccountsToListOperator, RemoveAccountsFromListOperator
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator


def _csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _membership(operator: type, **kwargs: Any) -> Any:
    return operator(task_id="t", list_id="l", accounts=[], **kwargs)


def _loader(**kwargs: Any) -> ExecutionCsvToSqlOperator:
    return ExecutionCsvToSqlOperator(
        task_id="load",
        source="/data/x.csv",
        sql_conn_id="wh",
        table="t",
        export_type="TACTIC_PERFORMANCE",
        **kwargs,
    )


# --- the file --------------------------------------------------------------------------------------


def test_writer_is_lazy_and_writes_the_one_header(tmp_path):
    target = tmp_path / "deep" / "rejects.csv"
    with RejectsWriter(target) as writer:
        pass
    assert not target.exists() and not target.parent.exists() and not writer.written
    with RejectsWriter(str(target)) as writer:
        writer.write("empty id", record=3, line=4, raw=raw_json({"acct": "", "name": 'Zoë, "the" one'}))
        writer.write("not found", raw=raw_json({"id": "001bad"}))
    assert writer.count == 2
    header, rows = _csv(target)
    assert header == list(REJECTS_HEADER) == ["line", "record", "reason", "raw"]
    assert rows[0] == {"line": "4", "record": "3", "reason": "empty id", "raw": rows[0]["raw"]}
    assert rows[0]["raw"] == '{"acct":"","name":"Zoë, \\"the\\" one"}'  # compact, non-ASCII kept
    assert (rows[1]["line"], rows[1]["record"], json.loads(rows[1]["raw"])) == ("", "", {"id": "001bad"})
    assert read_rejects(target) == rows == read_rejects(f"file://{target}")


def test_writer_moves_the_file_into_place_only_when_closed(tmp_path):
    target = tmp_path / "rejects.csv"
    target.write_text("line,record,reason,raw\n,1,an earlier run,\n", encoding="utf-8")
    before = target.read_bytes()
    with RejectsWriter(target) as writer:
        for n in range(1, 5001):
            writer.write("bad", record=n, raw="x" * 100)
        # a reader meanwhile sees the earlier file whole, never half of this one
        assert target.read_bytes() == before
        (temporary,) = [p for p in tmp_path.iterdir() if p != target]
        assert temporary.name.startswith(".rejects.csv.") and temporary.name.endswith(".tmp")
    assert [p.name for p in tmp_path.iterdir()] == ["rejects.csv"]
    assert len(read_rejects(target)) == 5000


def test_writer_keeps_the_rejects_of_a_failed_block_and_removes_stale_files_when_asked(tmp_path):
    target = tmp_path / "rejects.csv"
    with pytest.raises(RuntimeError), RejectsWriter(target) as writer:
        writer.write("first", record=1)
        raise RuntimeError("the send failed")
    assert [r["reason"] for r in read_rejects(target)] == ["first"]
    with RejectsWriter(target):
        pass
    assert target.exists(), "without remove_stale a clean run leaves an existing file alone"
    with RejectsWriter(target, remove_stale=True):
        pass
    assert not target.exists()
    with pytest.raises(ValueError, match="already closed"):
        writer.write("late")


def test_raw_text_that_is_not_utf8_stays_visible(tmp_path):
    target = tmp_path / "rejects.csv"
    raw = b"2026-10-03,Caf\xe9".decode("utf-8", "surrogateescape")
    with RejectsWriter(target) as writer:
        writer.write("not UTF-8", record=1, line=2, raw=raw)
        writer.write("odd", record=2, line=3, raw="\ud800 lone surrogate")
    rows = read_rejects(target)
    assert rows[0]["raw"] == "2026-10-03,Caf\\xe9"
    assert rows[1]["raw"] == "\\ud800 lone surrogate"


def test_writer_streams_to_an_object_store():
    from airflow.sdk.io import attach
    from fsspec.implementations.memory import MemoryFileSystem

    attach("memory", fs=MemoryFileSystem())
    target = ObjectStoragePath("memory://abm-rejects-test/run/try_1.csv")
    with RejectsWriter(target) as writer:
        writer.write("empty id", record=1, raw=raw_json({"id": ""}))
    assert [(r["record"], r["reason"]) for r in read_rejects(target)] == [("1", "empty id")]
    with RejectsWriter(target, remove_stale=True):
        pass
    assert not target.exists()


def test_rejects_location_is_keyed_by_run_and_try(tmp_path):
    path = rejects_location(
        str(tmp_path),
        dag_id="sync",
        run_id="manual__2026-11-22T03:20:00+00:00",
        task_id="group.add",
        try_number=2,
        map_index=3,
    )
    assert str(path).endswith("/rejects/sync/manual__2026-11-22T03_20_00_00_00/group.add.3/try_2.csv")
    assert str(path).startswith("file://" + str(tmp_path)) or str(path).startswith(str(tmp_path))


# --- limits ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "max_rejected must not be negative, got -1"),
        (1.0, "max_rejected as a fraction must be in [0, 1), got 1.0"),
        (-0.1, "max_rejected as a fraction must be in [0, 1), got -0.1"),
        (float("nan"), "max_rejected as a fraction must be in [0, 1), got nan"),
        (True, "max_rejected must be an int (count) or a float (fraction), or None; got True"),
        ("5", "max_rejected must be an int (count) or a float (fraction), or None; got '5'"),
    ],
)
def test_check_limit_refuses_naming_the_argument(value, message):
    with pytest.raises(ValueError) as err:
        check_limit(value, "max_rejected")
    assert str(err.value) == message


@pytest.mark.parametrize("value", [None, 0, 7, 0.0, 0.25, 0.999])
def test_check_limit_accepts_counts_fractions_and_none(value):
    assert check_limit(value, "max_rejected") == value


def test_check_rejects_decides_and_says_why():
    check_rejects(3, 3, total=10)
    check_rejects(3, None, total=3)
    check_rejects(3, 0.3, total=10)
    check_rejects(9, 0.5, total=10, final=False)  # a share is only decided once the total is known
    examples = [describe_reject("empty id", 2, 3), describe_reject("bad", 5), describe_reject("third", 9)]
    with pytest.raises(TooManyRejects) as err:
        check_rejects(4, 3, total=10, examples=examples, rejects_path="/r.csv", outcome="Nothing was loaded.")
    assert str(err.value) == (
        "4 of 10 records were rejected, more than max_rejected=3 allows; "
        "e.g. record 2 (line 3): empty id; record 5: bad; see /r.csv. Nothing was loaded."
    )
    assert (err.value.rejected, err.value.total, err.value.limit, err.value.rejects_path) == (
        4,
        10,
        3,
        "/r.csv",
    )
    with pytest.raises(TooManyRejects) as err:
        check_rejects(4, 3, total=1200, final=False)
    assert str(err.value) == "4 records were rejected by record 1200, more than max_rejected=3 allows."
    with pytest.raises(TooManyRejects) as err:
        check_rejects(4, 0.3, total=10, name="max_not_found", what="accounts were not found by the service")
    assert str(err.value) == (
        "4 of 10 accounts were not found by the service (40.00%), "
        "more than max_not_found=0.3 allows (30.00% of 10 records)."
    )


def test_too_many_rejects_fails_the_task_without_retries():
    assert issubclass(TooManyRejects, AirflowFailException)
    assert not issubclass(TooManyRejects, ValueError)


# --- every constructor takes the same limits ---------------------------------------------------------

BAD_LIMITS = [
    (-1, "must not be negative"),
    (1.5, "as a fraction must be in [0, 1)"),
    (1.0, "as a fraction must be in [0, 1)"),
    (True, "must be an int (count) or a float (fraction)"),
    ("10", "must be an int (count) or a float (fraction)"),
]


@pytest.mark.parametrize(("value", "fragment"), BAD_LIMITS)
@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda **kw: _membership(AddAccountsToListOperator, **kw), "max_rejected"),
        (lambda **kw: _membership(AddAccountsToListOperator, **kw), "max_not_found"),
        (lambda **kw: _membership(RemoveAccountsFromListOperator, **kw), "max_rejected"),
        (lambda **kw: _membership(RemoveAccountsFromListOperator, **kw), "max_not_found"),
        (_loader, "max_rejected"),
    ],
    ids=["add.max_rejected", "add.max_not_found", "remove.max_rejected", "remove.max_not_found", "loader"],
)
def test_every_constructor_refuses_a_bad_limit_naming_it(make, name, value, fragment):
    with pytest.raises(ValueError) as err:
        make(**{name: value})
    assert str(err.value).startswith(f"{name} {fragment}"), str(err.value)


@pytest.mark.parametrize("value", [None, 0, 12, 0.0, 0.05])
def test_every_constructor_takes_the_same_limits(value):
    assert _loader(max_rejected=value).max_rejected == value
    for operator in (AddAccountsToListOperator, RemoveAccountsFromListOperator):
        op = _membership(operator, max_rejected=value, max_not_found=value)
        assert (op.max_rejected, op.max_not_found) == (value, value)


def test_defaults():
    op = _membership(AddAccountsToListOperator)
    assert (op.max_rejected, op.max_not_found) == (0, None)
    assert type(op.max_rejected) is int
    assert _loader().max_rejected == 0
