"""Reading an export CSV record by record in Python: the header, the slow paths and reject reporting.

The fast paths never come through here: DuckDB and PostgreSQL read the file themselves. This module
serves the parts that must see individual records: the header check before any load, the generic
DB-API path, PostgreSQL's fallback when ``COPY`` refuses a malformed file, and turning the record
numbers a database reports as rejected into the file line number and raw text a person can act on.

Records are numbered from 1 after the header, exactly as DuckDB (its reject ``line`` minus one) and
PostgreSQL's ``COPY`` (one staging row per record) count them, so a database's record number and
this scanner's agree. Bytes are decoded with ``surrogateescape`` so that a non-UTF-8 byte splits
records the way the byte-oriented databases do, and is then reported rather than guessed at.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from pathlib import Path

from abm_provider.common.urls import Redactor
from abm_provider.exceptions import EXCERPT_CHARS, NotAnExport
from abm_provider.warehouse.schema import IDENTIFIER

_BOM = "\ufeff"
#: The longest field any path accepts. Python's csv module stops at 128 KiB by default and DuckDB's
#: reader at 2 MB a line, which would reject a valid record with a long free-text value on one path
#: and load it on another; the bound stays so that an unclosed quote cannot swallow a whole file into
#: memory.
MAX_FIELD_BYTES = 64 * 1024 * 1024
csv.field_size_limit(max(csv.field_size_limit(), MAX_FIELD_BYTES))


class UnreadableFile(ValueError):
    """The file has no usable header (empty, not CSV, not UTF-8): no load of it can succeed."""


@dataclass(frozen=True)
class Record:
    """One CSV record: its number after the header, its first physical line, raw text and fields."""

    number: int
    line: int
    raw: str
    fields: list[str] | None
    error: str | None

    @property
    def structural_error(self) -> str | None:
        """Why the record cannot be split into fields, or is not UTF-8; ``None`` when it is well formed."""
        return self.error


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class _LineFeed:
    """Feeds decoded lines to ``csv.reader`` while remembering them, to recover each record's raw text."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb")
        self.pending: list[str] = []
        self.lines_read = 0

    def __iter__(self) -> Iterator[str]:
        for raw in self._file:
            self.lines_read += 1
            text = raw.decode("utf-8", "surrogateescape")
            self.pending.append(text)
            yield text

    def take(self) -> str:
        text = "".join(self.pending)
        self.pending.clear()
        return text

    def close(self) -> None:
        self._file.close()


def read_header(path: Path) -> list[str]:
    """Return the header's column names, or raise naming the file if it has none or is not UTF-8."""
    feed = _LineFeed(path)
    try:
        return parse_header(feed, str(path))
    finally:
        feed.close()


def parse_header(lines: Iterable[str], what: str) -> list[str]:
    """The column names of the first record of ``lines`` (decoded with ``surrogateescape``).

    A first line that is not a header of column names (an HTML page, a JSON body, prose) raises
    :class:`~abm_provider.exceptions.NotAnExport` showing how it begins; an empty file or one that is
    not UTF-8 raises :class:`UnreadableFile`.
    """
    seen: list[str] = []

    def remembered() -> Iterator[str]:
        for line in lines:
            if sum(map(len, seen)) < EXCERPT_CHARS:
                seen.append(line)
            yield line

    def not_an_export(why: str) -> NotAnExport:
        # Redacted: an error page may echo the signed link it was asked for.
        redact = Redactor()
        excerpt = "".join(seen)[:EXCERPT_CHARS].encode("utf-8", "replace").decode("utf-8")
        return NotAnExport(what, redact(why), excerpt=redact(excerpt))

    try:
        row = next(csv.reader(remembered(), strict=True), None)
    except csv.Error as exc:
        raise not_an_export(f"its first line is not a CSV header ({exc})") from exc
    if not row:
        raise UnreadableFile(f"{what}: the file is empty; expected a header row")
    if any(_has_surrogates(name) for name in row):
        raise UnreadableFile(f"{what}: the header row is not valid UTF-8")
    row[0] = row[0].removeprefix(_BOM)
    names = [name.strip() for name in row]
    odd = [name for name in names if not IDENTIFIER.fullmatch(name)]
    if odd:
        raise not_an_export(f"its first line is not a header of column names ({odd[0][:60]!r} is not one)")
    return names


def iter_records(path: Path, expected_fields: int) -> Iterator[Record]:
    """Yield every record after the header, marking those that are malformed, short, long or not UTF-8."""
    feed = _LineFeed(path)
    reader = csv.reader(feed, strict=True)
    try:
        try:
            next(reader)
        except (csv.Error, StopIteration):
            return
        feed.take()
        number = 0
        first_line = feed.lines_read + 1
        while True:
            error: str | None = None
            fields: list[str] | None
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                fields, error = None, f"malformed CSV: {exc}"
            raw = feed.take()
            if fields == [] and error is None:
                # A blank line is no record to DuckDB or COPY either; skipping it keeps numbering aligned.
                first_line = feed.lines_read + 1
                continue
            number += 1
            if error is None and fields is not None:
                if len(fields) != expected_fields:
                    error = f"wrong number of fields: expected {expected_fields}, found {len(fields)}"
                elif _has_surrogates(raw):
                    error = "not valid UTF-8"
                elif "\x00" in raw:
                    error = "contains a NUL byte, which SQL text cannot hold"
            yield Record(number, first_line, raw, fields, error)
            first_line = feed.lines_read + 1
    finally:
        feed.close()


def locate(path: Path, expected_fields: int, numbers: Set[int]) -> dict[int, Record]:
    """Return the records with the given numbers (one pass, stops after the last one wanted)."""
    found: dict[int, Record] = {}
    if not numbers:
        return found
    last = max(numbers)
    for record in iter_records(path, expected_fields):
        if record.number in numbers:
            found[record.number] = record
        if record.number >= last:
            break
    return found


def awkward_bytes(path: Path, also: Mapping[bytes, str] | None = None) -> str | None:
    """Name the first bytes the databases' own CSV readers mishandle (carriage return, NUL), or ``None``.

    DuckDB's reader mis-splits a carriage return inside a quoted field, MySQL's ``LOAD DATA`` keeps
    it in the last field of a CRLF line, and SQL text cannot hold a NUL byte: a file with either is
    staged through Python instead. ``also``: more byte strings a reader mishandles, with their names.
    A byte search, so the fast path stays fast for machine-written exports.
    """
    names = {b"\r": "carriage returns", b"\x00": "NUL bytes", **(also or {})}
    with path.open("rb") as handle:
        while chunk := handle.read(8 << 20):
            for byte, name in names.items():
                if byte in chunk:
                    return name
    return None
