"""The Arrow pre-scan counts a file's records only when every record passes the rules the SQL check applies.

It lets PostgreSQL skip its row-by-row check, so a wrong "all pass" would let a bad value reach the
cast (and fail the load) instead of the rejects file. These tests hold it to the Python rules of
:func:`abm_provider.warehouse.schema.convert`, which ``tests/warehouse/test_rules_sql.py`` holds the
SQL rules to.
"""

from __future__ import annotations

import csv
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abm_provider.warehouse.prescan import count_if_all_pass
from abm_provider.warehouse.schema import Kind, convert, export_schema

SCHEMA = export_schema("TACTIC_PERFORMANCE")
HEADER = list(SCHEMA.column_names)
KINDS = SCHEMA.kinds()
KEYS = SCHEMA.natural_key
GOOD = ["2026-10-03", "7038948", 'Launch, "Q1"\nÜnïcode', "86159080", "Intent", "4404", "3", "52.01"]


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "export.csv"
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def _csv(tmp_path: Path, rows: list[list[str]]) -> Path:
    path = tmp_path / "export.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


def _count(path: Path) -> int | None:
    return count_if_all_pass(path, HEADER, KINDS, KEYS, threading.Event())


def test_a_file_that_passes_is_counted(tmp_path: Path) -> None:
    rows = [GOOD, [*GOOD[:5], "", "", ""], ["2024-02-29", *GOOD[1:]], ["2026-12-31", *GOOD[1:]]]
    assert _count(_csv(tmp_path, rows)) == 4


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("date", "2026-02-30"),
        ("date", "2023-02-29"),
        ("date", "2026-04-31"),
        ("date", "2026-13-01"),
        ("date", "0000-01-01"),
        ("date", "2026-1-01"),
        ("impressions", "12a"),
        ("impressions", "1" * 19),
        ("clicks", "1.0"),
        ("spend", "1.234"),
        ("spend", "1" * 17),
        ("spend", " 52.01"),
    ],
)
def test_one_bad_value_leaves_the_check_to_sql(tmp_path: Path, column: str, value: str) -> None:
    bad = list(GOOD)
    bad[HEADER.index(column)] = value
    assert _count(_csv(tmp_path, [GOOD, bad, GOOD])) is None


def test_missing_keys_and_quoted_empty_typed_fields_are_doubted(tmp_path: Path) -> None:
    head = ",".join(HEADER)
    # An unquoted empty tactic_id (NULL) and a quoted one ('') are both a missing key.
    assert _count(_file(tmp_path, f"{head}\n2026-10-03,1,c,,t,1,1,1.00\n")) is None
    assert _count(_file(tmp_path, f'{head}\n2026-10-03,1,c,"",t,1,1,1.00\n')) is None
    # COPY stages a quoted empty number as '' (rejected), an unquoted one as NULL (accepted).
    assert _count(_file(tmp_path, f'{head}\n2026-10-03,1,c,9,t,"",1,1.00\n')) is None
    assert _count(_file(tmp_path, f"{head}\n2026-10-03,1,c,9,t,,1,1.00\n")) == 1


@pytest.mark.parametrize(
    "body",
    [
        b'2026-10-03,1,"unclosed,9,t,1,1,1.00\n',
        b"2026-10-03,1,c,9,t,1,1\n",
        b"2026-10-03,1,c,9,t,\xff\xfe,1,1.00\n",
        b"2026-10-03,1,c,9,t,1,1,1.00\n\n2026-10-04,1,c,9,t,1,1,1.00\n",
    ],
    ids=["broken-quote", "short-record", "not-utf8", "blank-line"],
)
def test_files_copy_would_refuse_are_not_counted(tmp_path: Path, body: bytes) -> None:
    assert _count(_file(tmp_path, ",".join(HEADER).encode() + b"\n" + body)) is None


def test_a_header_other_than_the_plan_is_not_counted(tmp_path: Path) -> None:
    path = _csv(tmp_path, [GOOD])
    assert count_if_all_pass(path, ["date", *HEADER[2:]], KINDS, KEYS, threading.Event()) is None


def test_a_stopped_scan_counts_nothing(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    assert count_if_all_pass(_csv(tmp_path, [GOOD] * 10), HEADER, KINDS, KEYS, stop) is None


def _passes(row: list[str]) -> bool:
    for name, text in zip(HEADER, row, strict=True):
        if text == "":
            if name in KEYS:
                return False
            continue
        try:
            convert(KINDS[name], text)
        except ValueError:
            return False
    return True


_VALUES = {
    Kind.DATE: st.sampled_from(
        [
            "2026-10-03",
            "2024-02-29",
            "2023-02-29",
            "2026-02-30",
            "2026-06-31",
            "2026-07-31",
            "9999-12-31",
            "0001-01-01",
            "0000-05-05",
            "2026-00-10",
            "2026-10-32",
            "",
            "2026-10-3",
            "x",
            # What Arrow's date cast might take beyond the rule: a sign, spaces, time, 5-digit year.
            "+2026-10-03",
            " 2026-10-03",
            "2026-10-03 ",
            "2026-10-03T00:00",
            "20260-10-03",
            "0000-01-01",
            "0000-12-31",
        ]
    ),
    Kind.COUNT: st.one_of(
        st.integers(-(10**19), 10**19).map(str),
        st.sampled_from(["", "1.5", "+1", "١٢", "0x10", "007", "-0", " 7", "1" * 18, "1" * 19]),
    ),
    Kind.MONEY: st.one_of(
        st.decimals(
            allow_nan=False, allow_infinity=False, places=3, min_value=-(10**17), max_value=10**17
        ).map(str),
        st.sampled_from(["", "1.", ".5", "1e3", "-0.00"]),
    ),
    Kind.TEXT: st.text(max_size=6),
}


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(rows=st.lists(st.tuples(*(_VALUES[KINDS[n]] for n in HEADER)).map(list), min_size=1, max_size=8))
def test_the_count_agrees_with_the_rules(tmp_path: Path, rows: list[list[str]]) -> None:
    rows = [[value.replace("\r", "") for value in row] for row in rows]
    counted = _count(_csv(tmp_path, rows))
    if all(_passes(row) for row in rows):
        assert counted == len(rows)
    else:
        assert counted is None


def _order(path: Path, block_size: int | None = None) -> tuple[int | None, bool]:
    from abm_provider.warehouse import prescan

    order = prescan.KeyOrder()
    if block_size is not None:  # small blocks: the comparison across batch boundaries is exercised
        original, prescan.BLOCK_SIZE = prescan.BLOCK_SIZE, block_size
    try:
        count = count_if_all_pass(path, HEADER, KINDS, KEYS, threading.Event(), order)
    finally:
        if block_size is not None:
            prescan.BLOCK_SIZE = original
    return count, order.increasing


def _keyed(date: str, tactic: str) -> list[str]:
    return [date, *GOOD[1:3], tactic, *GOOD[4:]]


def test_keys_in_increasing_order_prove_that_none_repeats(tmp_path: Path) -> None:
    rows = [_keyed(f"2026-10-0{day}", f"{tactic:08d}") for day in (1, 2, 3) for tactic in range(50)]
    assert _order(_csv(tmp_path, rows), block_size=1024) == (150, True)


@pytest.mark.parametrize(
    "where",
    ["repeated in one batch", "repeated across batches", "out of order", "lower tactic next day is fine"],
)
def test_keys_that_repeat_or_go_back_prove_nothing(tmp_path: Path, where: str) -> None:
    rows = [_keyed(f"2026-10-0{day}", f"{tactic:08d}") for day in (1, 2) for tactic in range(60)]
    if where == "repeated in one batch":
        rows.insert(3, rows[2])
    elif where == "repeated across batches":
        rows.append(rows[-1])
    elif where == "out of order":
        rows[10], rows[11] = rows[11], rows[10]
    expect_increasing = where == "lower tactic next day is fine"
    count, increasing = _order(_csv(tmp_path, rows), block_size=1024)
    assert count == len(rows)
    assert increasing is expect_increasing


def test_the_pre_scan_gathers_the_days_across_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The days a load replaced come from the pass over the file, not from a DISTINCT in the database."""
    from abm_provider.warehouse import prescan

    monkeypatch.setattr(prescan, "BLOCK_SIZE", 4096)  # many batches, each with a few of the days
    rows = [_keyed(f"2026-10-{day:02d}", f"{tactic:08d}") for day in (3, 1, 2, 30) for tactic in range(60)]
    days = prescan.DaySet("date")
    assert count_if_all_pass(_csv(tmp_path, rows), HEADER, KINDS, KEYS, threading.Event(), days=days) == 240
    assert sorted(days.values) == ["2026-10-01", "2026-10-02", "2026-10-03", "2026-10-30"]
