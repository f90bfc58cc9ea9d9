"""The rejects output: every record a load refused, with its line number, the reason and the raw text.

Written next to the source (``<file>.rejects.csv``) unless a path is configured, under a temporary
name that is renamed into place, so a reader never sees half a rejects file. Raw text that was not
UTF-8 is written with backslash escapes rather than dropped, so the offending bytes stay visible.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REJECTS_HEADER = ("line", "record", "reason", "raw")


@dataclass(frozen=True)
class Reject:
    """One refused record. ``line`` is the file line it starts on (the header is line 1)."""

    record: int
    line: int | None
    reason: str
    raw: str


def default_rejects_path(source: Path) -> Path:
    return source.with_name(source.name + ".rejects.csv")


def write_rejects(path: Path, rejects: Iterable[Reject]) -> int:
    """Write the rejects file atomically and return how many rows it holds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    count = 0
    with tmp.open("w", encoding="utf-8", errors="backslashreplace", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(REJECTS_HEADER)
        for reject in sorted(rejects, key=lambda r: r.record):
            raw = reject.raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            writer.writerow((reject.line, reject.record, reject.reason, raw.rstrip("\r\n")))
            count += 1
    tmp.replace(path)
    return count


def read_rejects(path: Path) -> list[dict[str, str]]:
    """Read a rejects file back (used by tests and by people triaging a failed load)."""
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


class TooManyRejects(ValueError):
    """More records were refused than ``max_rejected`` allows."""


def check_threshold(rejected: int, total: int, max_rejected: int | float, rejects_path: Path | None) -> None:
    """Raise when the rejected count passes the limit: an int is a count, a float below 1 a fraction."""
    if isinstance(max_rejected, float):
        if not 0.0 <= max_rejected < 1.0:
            raise ValueError(f"max_rejected as a fraction must be in [0, 1), got {max_rejected}")
        over = total > 0 and rejected / total > max_rejected
        limit = f"{max_rejected:.2%} of {total} records"
    else:
        if max_rejected < 0:
            raise ValueError(f"max_rejected must not be negative, got {max_rejected}")
        over = rejected > max_rejected
        limit = f"{max_rejected} records"
    if over:
        where = f"; see {rejects_path}" if rejects_path else ""
        raise TooManyRejects(
            f"{rejected} of {total} records were rejected, more than max_rejected={limit}{where}. "
            "Nothing was loaded."
        )
