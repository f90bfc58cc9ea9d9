"""``abm_provider.warehouse.records``: an export CSV read record by record, as the databases count them.

Records are numbered from 1 after the header, blank lines skipped, and each carries its first line
and raw text, so a record number a database reports as rejected becomes a line and text a person
can act on. The header check refuses what is not an export (an error page, a JSON body) with a
short, redacted excerpt, and an empty or non-UTF-8 file as unreadable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from abm_provider.exceptions import NotAnExport
from abm_provider.warehouse.records import UnreadableFile, iter_records, locate, read_header


def write(tmp_path: Path, data: bytes | str, name: str = "export.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


# --- the header -------------------------------------------------------------------------------------


def test_the_header_names_come_without_a_byte_order_mark_or_padding(tmp_path: Path) -> None:
    path = write(tmp_path, "\ufeffdate, tactic_id ,clicks\r\n2026-10-01,t1,3\r\n")
    assert read_header(path) == ["date", "tactic_id", "clicks"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "the file is empty; expected a header row"),
        (b"d\xe9te,clicks\n2026-10-01,3\n", "the header row is not valid UTF-8"),
    ],
    ids=["empty", "latin1_header"],
)
def test_an_empty_or_non_utf8_file_is_unreadable_naming_it(tmp_path: Path, data: bytes, message: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(UnreadableFile, match=message) as info:
        read_header(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("body", "begins"),
    [
        ("<html><head><title>503 Service Unavailable</title></head></html>\n", "<html><head><title>503"),
        ('{"error": {"code": 403, "message": "Request has expired"}}\n', '{"error": {"code": 403'),
        ("Access denied.\n", "Access denied."),
        ('"date,clicks\n2026-10-01,3\n', '"date,clicks'),
    ],
    ids=["html", "json", "prose", "unclosed_quote"],
)
def test_a_first_line_that_is_not_a_header_is_not_an_export(tmp_path: Path, body: str, begins: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(NotAnExport) as info:
        read_header(path)
    assert info.value.excerpt.startswith(begins)
    assert "is not the export CSV" in str(info.value) and str(path) in str(info.value)


def test_the_excerpt_of_an_error_page_hides_a_signed_link_it_echoes(tmp_path: Path) -> None:
    signature = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    link = f"https://bucket.s3.amazonaws.com/e.csv?X-Amz-Expires=900&X-Amz-Signature={signature}"
    path = write(tmp_path, f"<Error><Code>AccessDenied</Code><Resource>{link}</Resource></Error>\n")
    with pytest.raises(NotAnExport) as info:
        read_header(path)
    assert "AccessDenied" in info.value.excerpt
    assert signature not in str(info.value) and signature not in info.value.excerpt


def test_the_excerpt_is_bounded(tmp_path: Path) -> None:
    path = write(tmp_path, "<html>" + "x" * 100_000 + "</html>\n")
    with pytest.raises(NotAnExport) as info:
        read_header(path)
    assert len(info.value.excerpt) <= 300 and len(str(info.value)) < 1_000


# --- records ----------------------------------------------------------------------------------------


def test_records_are_numbered_after_the_header_with_their_first_line_and_raw_text(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'date,name,clicks\n2026-10-01,"two\nlines",1\n\n2026-10-02,plain,2\r\n2026-10-03,"a, ""b""",3\n',
    )
    records = list(iter_records(path, 3))
    assert [(r.number, r.line) for r in records] == [(1, 2), (2, 5), (3, 6)]
    assert [r.fields for r in records] == [
        ["2026-10-01", "two\nlines", "1"],
        ["2026-10-02", "plain", "2"],
        ["2026-10-03", 'a, "b"', "3"],
    ]
    assert [r.raw for r in records] == [
        '2026-10-01,"two\nlines",1\n',
        "2026-10-02,plain,2\r\n",
        '2026-10-03,"a, ""b""",3\n',
    ]
    assert all(r.error is None and r.structural_error is None for r in records)


def test_each_kind_of_unsound_record_says_why_and_the_numbering_goes_on(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        b"date,name,clicks\n"
        b"2026-10-01,short\n"  # 1
        b"2026-10-02,long,2,extra\n"  # 2
        b"2026-10-03,Caf\xe9,3\n"  # 3: Latin-1
        b"2026-10-04,nul\x00here,4\n"  # 4
        b'2026-10-05,"a"b,5\n'  # 5: text after a closing quote
        b"2026-10-06,fine,6\n",  # 6
    )
    records = list(iter_records(path, 3))
    assert [r.number for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r.line for r in records] == [2, 3, 4, 5, 6, 7]
    errors = [r.error for r in records]
    assert errors[0] == "wrong number of fields: expected 3, found 2"
    assert errors[1] == "wrong number of fields: expected 3, found 4"
    assert errors[2] == "not valid UTF-8"
    assert errors[3] == "contains a NUL byte, which SQL text cannot hold"
    assert errors[4] is not None and errors[4].startswith("malformed CSV:") and records[4].fields is None
    assert errors[5] is None and records[5].fields == ["2026-10-06", "fine", "6"]


def test_a_header_alone_has_no_records(tmp_path: Path) -> None:
    assert list(iter_records(write(tmp_path, "date,name,clicks\n"), 3)) == []
    assert list(iter_records(write(tmp_path, "", "empty.csv"), 3)) == []


def test_locate_returns_the_records_asked_for(tmp_path: Path) -> None:
    lines = "".join(f"2026-10-{day:02d},n{day},{day}\n" for day in range(1, 21))
    path = write(tmp_path, "date,name,clicks\n" + lines)
    found = locate(path, 3, {2, 7, 19})
    assert sorted(found) == [2, 7, 19]
    assert found[7].raw == "2026-10-07,n7,7\n" and found[7].line == 8
    assert locate(path, 3, set()) == {}
    assert locate(path, 3, {25}) == {}, "a number past the last record is not there"
