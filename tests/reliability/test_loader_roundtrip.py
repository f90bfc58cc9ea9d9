"""Property: generated export files round-trip through the DuckDB loader; each record lands exactly once.

``tests/transfers/test_load_roundtrip.py`` already checks "loaded or rejected, exactly once" for text
records on every warehouse. This one works at the byte level and predicts the outcome of each record
from the file format's rules (docs/service-behaviour.md "CSV files"), without asking the loader:

- files may start with a byte-order mark, use CRLF line ends, hold blank lines between records;
- records may carry a byte that is not UTF-8, one field too many or too few, values that break a
  column's rule (dates like ``2026-02-30``, counts like ``1e3``, money with three places) or an
  empty key, and text with commas, quotes, CR and LF;

and then requires that each valid record is in the table with exactly its values (unless a later
record of the file has its key, which makes it a "duplicate" reject), and that each other record is
in the rejects file once, on its own first line, with the reason of the first rule it breaks.
NUL bytes are left out: DuckDB's fast path loads them where PostgreSQL rejects them (reported as a
loader bug, pinned in ``test_csv_inputs.py``).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from abm_provider.common.rejects import read_rejects
from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import TACTIC_COLUMNS, TACTIC_KEY, download_xcom, normalise

from .badinput_support import duckdb_target

#: Stands for a Latin-1 byte while a record is built as text; replaced by ``\xe9`` in the bytes.
LATIN1_MARK = "\ue000"
KINDS = {"date": "date", "impressions": "count", "clicks": "count", "spend": "money"}
RULES = {
    "date": re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    "count": re.compile(r"-?[0-9]{1,18}"),
    "money": re.compile(r"-?[0-9]{1,16}(\.[0-9]{1,2})?"),
}
DESCRIBE = {"date": "a date YYYY-MM-DD", "count": "an integer", "money": "a decimal with at most 2 places"}

_TEXT = st.text(st.characters(min_codepoint=1, max_codepoint=0xD7FF), max_size=10) | st.sampled_from(
    ["a,b", 'say "hi"', "two\nlines", "cr\rinside", "crlf\r\nin", " padded ", "", "NULL", "\\N", "Ünïcødé"]
)
_VALID = {
    "date": st.dates(min_value=dt.date(1, 1, 1)).map(lambda d: d.isoformat()),
    "count": st.integers(-(10**17), 10**17).map(str),
    "money": st.tuples(st.integers(-(10**15), 10**15), st.sampled_from(["", ".5", ".05", ".10"])).map(
        lambda t: f"{t[0]}{t[1]}"
    ),
}
_INVALID = {
    "date": st.sampled_from(
        ["2026-02-30", "2026-13-01", "20260101", "2026-1-5", "01/02/2026", "0000-01-01", "x"]
    ),
    "count": st.sampled_from(["1.0", "1e3", " 7", "+5", "1,000", "x", "9" * 19, "--1"]),
    "money": st.sampled_from(["1.005", "1,00", "$1", "1.", ".5", "abc", "1e2", "9" * 17]),
}


def _valid_date(text: str) -> bool:
    if not RULES["date"].fullmatch(text) or text.startswith("0000"):
        return False
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def valid(kind: str, text: str) -> bool:
    """The file format's rule for a non-empty value, written independently of the loader."""
    return _valid_date(text) if kind == "date" else bool(RULES[kind].fullmatch(text))


@dataclass
class Generated:
    fields: list[str]
    latin1: bool


PROBLEMS = ["none", "none", "none", "value", "empty_key", "field_count", "latin1"]


@st.composite
def generated_record(draw: st.DrawFn) -> Generated:
    """A valid record, or one with a single problem, so each rule is exercised on its own."""
    fields = []
    for column in TACTIC_COLUMNS:
        kind = KINDS.get(column)
        if column == "tactic_id":
            fields.append(draw(st.sampled_from(["t1", "t2", "t3"])))
        elif column == "date":
            fields.append(draw(st.sampled_from(["2026-10-01", "2026-10-02"]) | _VALID["date"]))
        elif kind is None:
            fields.append(draw(_TEXT))
        else:
            fields.append(draw(_VALID[kind]) if draw(st.integers(0, 10)) else "")
    problem = draw(st.sampled_from(PROBLEMS))
    if problem == "value":
        column = draw(st.sampled_from(sorted(KINDS)))
        fields[TACTIC_COLUMNS.index(column)] = draw(_INVALID[KINDS[column]])
    elif problem == "empty_key":
        fields[TACTIC_COLUMNS.index(draw(st.sampled_from(TACTIC_KEY)))] = ""
    elif problem == "field_count":
        fields = fields[:-1] if draw(st.booleans()) else [*fields, "extra"]
    elif problem == "latin1":
        fields[2] = "Caf" + LATIN1_MARK
    return Generated(fields, problem == "latin1")


def render(fields: list[str], end: str) -> bytes:
    buffer = io.StringIO()
    quoting = csv.QUOTE_ALL if any("\r" in f for f in fields) else csv.QUOTE_MINIMAL
    csv.writer(buffer, lineterminator=end, quoting=quoting).writerow(fields)
    return buffer.getvalue().encode("utf-8").replace(LATIN1_MARK.encode("utf-8"), b"\xe9")


def first_broken_rule(record: Generated) -> str | None:
    """The reason the loader must give for this record, or ``None`` when it is valid."""
    if len(record.fields) != len(TACTIC_COLUMNS):
        return f"malformed record (wrong number of fields: expected 8, found {len(record.fields)})"
    if record.latin1:
        return "malformed record (not valid UTF-8)"
    values = dict(zip(TACTIC_COLUMNS, record.fields, strict=True))
    for key in TACTIC_KEY:
        if values[key] == "":
            return f"missing value in key column {key}"
    for column in TACTIC_COLUMNS:
        kind = KINDS.get(column)
        if kind and values[column] != "" and not valid(kind, values[column]):
            return f"column {column}: expected {DESCRIBE[kind]}, got {values[column]}"
    return None


_files = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=st.lists(generated_record(), min_size=12, max_size=40),
    bom=st.booleans(),
    crlf=st.booleans(),
    blank_after=st.sets(st.integers(0, 39), max_size=3),
)
def test_every_generated_record_is_loaded_or_rejected_exactly_once_as_predicted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    records: list[Generated],
    bom: bool,
    crlf: bool,
    blank_after: set[int],
) -> None:
    number = next(_files)
    end = "\r\n" if crlf else "\n"
    data = (b"\xef\xbb\xbf" if bom else b"") + ",".join(TACTIC_COLUMNS).encode() + end.encode()
    first_lines = []
    for index, record in enumerate(records):
        first_lines.append(data.count(b"\n") + 1)
        data += render(record.fields, end)
        if index in blank_after and index < len(records) - 1:
            data += end.encode()
    path = tmp_path / f"generated_{number}.csv"
    path.write_bytes(data)
    note(f"file: {data!r}")
    target = duckdb_target(tmp_path / f"generated_{number}.duckdb", monkeypatch)

    out = ExecutionCsvToSqlOperator(
        task_id="load",
        source=download_xcom(path, f"gen-{number}"),
        max_rejected=10**6,
        **target.operator_kwargs(),
    ).execute(context={})

    # The oracle: rule breakers rejected; among valid records the last of each key wins.
    reasons = {n: first_broken_rule(r) for n, r in enumerate(records, start=1)}
    winners: dict[tuple[str, str], int] = {}
    for n, record in enumerate(records, start=1):
        if reasons[n] is None:
            winners[(record.fields[0], record.fields[3])] = n
    for n, reason in reasons.items():
        key = (records[n - 1].fields[0], records[n - 1].fields[3]) if reason is None else None
        if key is not None and winners[key] != n:
            reasons[n] = "duplicate natural key (date, tactic_id)"

    for reason in reasons.values():
        event(str(reason).split(":")[0].split("(")[0].strip())
    rejects = read_rejects(Path(out["rejects_path"])) if out["rejects_path"] else []
    by_record = {int(r["record"]): r for r in rejects}
    assert len(by_record) == len(rejects), "a record was rejected twice"
    assert sorted(by_record) == sorted(n for n, reason in reasons.items() if reason is not None)
    for n, reject in by_record.items():
        assert reject["reason"].startswith(str(reasons[n])), (n, reject["reason"], reasons[n])
        assert int(reject["line"]) == first_lines[n - 1]

    table = {(r[0], r[3]): r[:-1] for r in target.rows()}
    assert len(table) == len(target.rows()) == len(winners) == out["rows_loaded"]
    for key, n in winners.items():
        want = tuple(normalise(c, v) for c, v in zip(TACTIC_COLUMNS, records[n - 1].fields, strict=True))
        assert table[key] == want, f"record {n} changed on its way into the table"
    assert out["rows_loaded"] + out["rows_rejected"] == len(records)


def test_the_oracle_is_not_the_loader() -> None:
    """A few fixed answers, so a mistake in the oracle cannot agree with the same mistake in the loader."""
    assert not valid("date", "2026-02-29") and valid("date", "2024-02-29") and not valid("date", "0000-01-01")
    assert valid("count", "-" + "9" * 18) and not valid("count", "9" * 19) and not valid("count", " 7")
    assert valid("money", "-1.5") and not valid("money", "1.005") and not valid("money", "1.")
    short = Generated(TACTIC_COLUMNS[:7], latin1=False)
    assert first_broken_rule(short) == "malformed record (wrong number of fields: expected 8, found 7)"
    assert render(["Caf" + LATIN1_MARK], "\n") == b"Caf\xe9\n"
