"""Property: every record of a generated file ends in the table or in the rejects, exactly once."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
from collections import defaultdict
from pathlib import Path

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from abm_provider.common.rejects import read_rejects
from support.export_files import TACTIC_COLUMNS, download_xcom, normalise

_SAMPLES = ["a,b", 'say "hi"', "two\nlines", "cr\rinside", " padded ", "Ünïcødé", "\\.", "NULL", ""]
# Junk may hold NUL, which SQL text cannot; names drawn as valid may not.
_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x2FFF), max_size=12) | st.sampled_from(_SAMPLES)
_NAME = st.text(st.characters(min_codepoint=1, max_codepoint=0x2FFF), max_size=12) | st.sampled_from(_SAMPLES)
_VALID = {
    "date": st.dates(min_value=dt.date(2000, 1, 1)).map(lambda d: d.isoformat()),
    "campaign_id": st.sampled_from(["c1", "c2"]),
    "campaign_name": _NAME,
    "tactic_id": st.sampled_from(["t1", "t2", "t3"]),
    "tactic_name": _NAME,
    "impressions": st.integers(0, 10**12).map(str),
    "clicks": st.integers(-5, 10**6).map(str),
    "spend": st.decimals(min_value=0, max_value=10**9, places=2).map(str),
}


@st.composite
def records(draw: st.DrawFn) -> tuple[list[str], bool]:
    """A record's fields and whether they were all drawn from the valid strategies."""
    fields, valid = [], True
    for column in TACTIC_COLUMNS:
        if draw(st.integers(0, 9)) == 0:
            fields.append(draw(_TEXT))
            valid = False
        else:
            fields.append(draw(_VALID[column]))
    if draw(st.integers(0, 14)) == 0:
        fields = fields[: draw(st.integers(1, 7))] if draw(st.booleans()) else [*fields, "extra"]
        valid = False
    return fields, valid


def render(fields: list[str]) -> str:
    """RFC 4180 text of one record; csv's minimal quoting leaves a CR unquoted when lines end in LF."""
    buffer = io.StringIO()
    quoting = csv.QUOTE_ALL if any("\r" in f for f in fields) else csv.QUOTE_MINIMAL
    csv.writer(buffer, lineterminator="\n", quoting=quoting).writerow(fields)
    return buffer.getvalue()


_tables = itertools.count()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(records(), min_size=1, max_size=25))
def test_every_record_is_loaded_or_rejected_exactly_once(warehouse, tmp_path, generated):
    table = f"{warehouse.table}_{next(_tables)}"
    raws = [render(fields) for fields, _ in generated]
    path = tmp_path / f"{table.replace('.', '_')}.csv"
    path.write_bytes((",".join(TACTIC_COLUMNS) + "\n" + "".join(raws)).encode("utf-8"))
    note(f"records: {raws!r}")
    lines, line = [], 2
    for raw in raws:
        lines.append(line)
        line += raw.count("\n")

    out = warehouse.operator(source=download_xcom(path, "rt"), table=table, max_rejected=10**6).execute(
        context={}
    )

    rejects = read_rejects(Path(out["rejects_path"])) if out["rejects_path"] else []
    rejected = [int(r["record"]) for r in rejects]
    assert len(rejected) == len(set(rejected)), "a record was rejected twice"
    assert set(rejected) <= set(range(1, len(raws) + 1))
    for r in rejects:
        assert int(r["line"]) == lines[int(r["record"]) - 1]
    loaded = warehouse.contents(table=table) if out["rows_loaded"] or not rejected else {}
    assert out["rows_loaded"] + out["rows_rejected"] == len(raws)
    assert len(loaded) == out["rows_loaded"]

    kept_by_key = defaultdict(list)
    for number, (fields, valid) in enumerate(generated, start=1):
        if number in rejected:
            continue
        assert len(fields) == len(TACTIC_COLUMNS)
        kept_by_key[(fields[0], fields[3])].append(fields)
    assert set(kept_by_key) == set(loaded)
    for key, kept in kept_by_key.items():
        assert len(kept) == 1, f"key {key} was neither loaded once nor rejected"
        values = tuple(normalise(c, v) for c, v in zip(TACTIC_COLUMNS, kept[0], strict=True))
        assert loaded[key] == values
    # Records drawn entirely from valid values are only ever rejected as superseded duplicates.
    reasons = {int(r["record"]): r["reason"] for r in rejects}
    for number, (_, valid) in enumerate(generated, start=1):
        if valid and number in reasons:
            assert reasons[number].startswith("duplicate natural key"), reasons[number]
