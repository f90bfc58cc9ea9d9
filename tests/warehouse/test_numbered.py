"""``abm_provider.warehouse.numbered``: an export as files of numbered text rows, each record's number the
one ``iter_records`` gives it, its text exactly as written, malformed records set aside."""

from __future__ import annotations

from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from abm_provider.warehouse.numbered import RECORD_COLUMN, write_numbered
from abm_provider.warehouse.records import iter_records

HEADER = ["date", "name", "spend"]


def rows_of(paths: tuple[Path, ...]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for path in paths:
        table = pq.read_table(path) if path.suffix == ".parquet" else pcsv.read_csv(path)
        rows += table.to_pylist()
    return rows


def test_records_keep_their_text_and_their_numbers_across_files(tmp_path: Path) -> None:
    source = tmp_path / "export.csv"
    source.write_text(
        'date,name,spend\n2026-11-01,"a, ""b""",12.50\n\n2026-11-02,,007\n2026-11-03,"two\nlines",1\n'
        '2026-11-04,"",0.10\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    out.mkdir()

    files = write_numbered(source, HEADER, out, rows_per_file=3)

    assert [p.name for p in files.paths] == ["part-00000.parquet", "part-00001.parquet"]
    assert (files.rows, dict(files.rejects)) == (4, {})
    assert rows_of(files.paths) == [
        {RECORD_COLUMN: 1, "date": "2026-11-01", "name": 'a, "b"', "spend": "12.50"},
        {RECORD_COLUMN: 2, "date": "2026-11-02", "name": None, "spend": "007"},
        {RECORD_COLUMN: 3, "date": "2026-11-03", "name": "two\nlines", "spend": "1"},
        {RECORD_COLUMN: 4, "date": "2026-11-04", "name": "", "spend": "0.10"},
    ]
    assert [r.number for r in iter_records(source, 3)] == [1, 2, 3, 4]


def test_a_file_arrow_cannot_split_is_read_by_python_and_its_malformed_records_set_aside(
    tmp_path: Path,
) -> None:
    source = tmp_path / "export.csv"
    source.write_text(
        "date,name,spend\n2026-11-01,x,1\n2026-11-02,short\n2026-11-03,y,3,extra\n2026-11-04,z,4\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    out.mkdir()

    files = write_numbered(source, HEADER, out, file_format="csv")

    assert files.rows == 2
    assert sorted(files.rejects) == [2, 3]
    assert all(reason.startswith("malformed record") for reason in files.rejects.values())
    assert [(r[RECORD_COLUMN], r["name"]) for r in rows_of(files.paths)] == [(1, "x"), (4, "z")]
    assert [p.name for p in out.iterdir()] == ["part-00000.csv"], "the abandoned Arrow pass left a file"


def test_bytes_that_are_not_utf8_make_a_reject_not_a_wrong_row(tmp_path: Path) -> None:
    source = tmp_path / "export.csv"
    source.write_bytes(b"date,name,spend\n2026-11-01,caf\xe9,1\n2026-11-02,ok,2\n")
    out = tmp_path / "out"
    out.mkdir()

    files = write_numbered(source, HEADER, out)

    assert list(files.rejects) == [1]
    assert [(r[RECORD_COLUMN], r["name"]) for r in rows_of(files.paths)] == [(2, "ok")]


def test_a_header_alone_writes_no_file(tmp_path: Path) -> None:
    source = tmp_path / "export.csv"
    source.write_text("date,name,spend\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()

    files = write_numbered(source, HEADER, out)

    assert (files.paths, files.rows) == ((), 0)
