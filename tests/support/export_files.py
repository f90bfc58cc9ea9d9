"""Export CSVs the tests write themselves, and what a loaded table must then hold.

The header and the natural keys are the emulator's (``abm_emulator.csvgen``), which models the
service's published format; everything else is computed here with plain ``csv`` and ``decimal``,
independently of the loader, so a test comparing the loader's table with :func:`expected` can fail.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from abm_emulator.csvgen import (
    DISPLAY_TACTIC_ACCOUNT_PERFORMANCE,
    EXPORT_COLUMNS,
    KEY_COLUMNS,
    TACTIC_PERFORMANCE,
)

#: The export type the tests create jobs for, fire and load.
EXPORT_TYPE = TACTIC_PERFORMANCE
TACTIC_COLUMNS = list(EXPORT_COLUMNS[TACTIC_PERFORMANCE])
ACCOUNT_COLUMNS = list(EXPORT_COLUMNS[DISPLAY_TACTIC_ACCOUNT_PERFORMANCE])
COLUMNS = {TACTIC_PERFORMANCE: TACTIC_COLUMNS, DISPLAY_TACTIC_ACCOUNT_PERFORMANCE: ACCOUNT_COLUMNS}
KEYS = dict(KEY_COLUMNS)
TACTIC_KEY = KEYS[TACTIC_PERFORMANCE]
COUNT_COLUMNS = frozenset({"impressions", "clicks", "page_views", "engaged_visitors"})
#: Names that test the CSV paths: a comma and quotes, accents, a line break, wide characters.
NAMES = ['Spring, "Launch"', "Café Münster", "Ørsted ÆØÅ", "plain", "multi\nline", "日本語 キャンペーン"]


# --- rows -----------------------------------------------------------------------------------------


def days(start: dt.date, count: int) -> list[dt.date]:
    return [start + dt.timedelta(days=i) for i in range(count)]


def tactic_rows(
    dates: Sequence[dt.date], tactics: int, *, version: int, seed: int = 1
) -> list[dict[str, str]]:
    """TACTIC_PERFORMANCE rows; another ``version`` restates every figure, as a later export does."""
    rows = []
    for day in dates:
        for t in range(tactics):
            rng = random.Random(f"{seed}/{version}/{day}/{t}")
            impressions = rng.randint(0, 100_000)
            rows.append(
                {
                    "date": day.isoformat(),
                    "campaign_id": f"c{t % 3}",
                    "campaign_name": NAMES[t % len(NAMES)],
                    "tactic_id": f"t{t}",
                    "tactic_name": f"{NAMES[(t + 1) % len(NAMES)]} #{t}",
                    "impressions": str(impressions),
                    "clicks": str(rng.randint(0, max(impressions // 10, 1))),
                    "spend": f"{rng.randint(0, 10_000_000) / 100:.2f}",
                }
            )
    return rows


#: Two executions of one export: three days, then a newer one that restates the last two and adds a
#: fourth (what each warehouse's load tests replace).
FIRST_EXECUTION = tactic_rows(days(dt.date(2026, 10, 1), 3), 4, version=1)
NEWER_EXECUTION = tactic_rows(days(dt.date(2026, 10, 2), 3), 4, version=2)


def account_rows(
    dates: Sequence[dt.date], tactics: int, accounts: int, *, version: int
) -> list[dict[str, str]]:
    """DISPLAY_TACTIC_ACCOUNT_PERFORMANCE rows, ``accounts`` per tactic and day."""
    rows = []
    for day in dates:
        for t in range(tactics):
            for a in range(accounts):
                rng = random.Random(f"{version}/{day}/{t}/{a}")
                rows.append(
                    {
                        "date": day.isoformat(),
                        "tactic_id": f"t{t}",
                        "tactic_name": NAMES[t % len(NAMES)],
                        "account_id": f"a{a}",
                        "account_name": NAMES[a % len(NAMES)],
                        "crm_org_id": f"00D{a:05d}",
                        "impressions": str(rng.randint(0, 1000)),
                        "clicks": str(rng.randint(0, 50)),
                        "spend": f"{rng.randint(0, 100_000) / 100:.2f}",
                        "page_views": str(rng.randint(0, 30)),
                        "engaged_visitors": str(rng.randint(0, 5)),
                    }
                )
    return rows


# --- files ----------------------------------------------------------------------------------------


def csv_bytes(records: Iterable[Sequence[str]], end: str = "\n") -> bytes:
    """RFC 4180 records (minimal quoting) as UTF-8, each ending in ``end``."""
    lines: list[str] = []

    class _Sink:
        def write(self, text: str) -> None:
            lines.append(text)

    writer = csv.writer(_Sink(), lineterminator=end)
    for record in records:
        writer.writerow(record)
    return "".join(lines).encode("utf-8")


def csv_line(
    row: Mapping[str, str], columns: Sequence[str] = TACTIC_COLUMNS, end: str = "\n", **changes: str
) -> bytes:
    """One record of ``row`` (with ``changes`` applied) as bytes, ending in ``end``."""
    return csv_bytes([[changes.get(c, row[c]) for c in columns]], end)


def csv_record(row: Mapping[str, str], columns: Sequence[str] = TACTIC_COLUMNS, **changes: str) -> str:
    """One record of ``row`` (with ``changes`` applied) as text with no line end, to join by hand.

    Written with a ``\n`` line end, then cut: the ``csv`` module quotes a field holding a line break
    only when the break is part of its line terminator.
    """
    return csv_line(row, columns, "\n", **changes).decode("utf-8").removesuffix("\n")


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, str]]) -> Path:
    """``columns`` as the header, then each row's values in that order."""
    path.write_bytes(csv_bytes([columns]) + b"".join(csv_line(r, columns) for r in rows))
    return path


def write_export(path: Path, rows: Iterable[Mapping[str, str] | bytes], *, extra: bytes = b"") -> Path:
    """A TACTIC_PERFORMANCE file: header, the rows, then ``extra``; a row given as bytes is written as it
    is (a bad record on purpose)."""
    records = (r if isinstance(r, bytes) else csv_line(r) for r in rows)
    path.write_bytes(csv_bytes([TACTIC_COLUMNS]) + b"".join(records) + extra)
    return path


def download_xcom(path: Path, execution_id: str, export_type: str = TACTIC_PERFORMANCE) -> dict[str, Any]:
    """What the download operator hands the loader: path, size, checksum, execution id and type."""
    data = path.read_bytes()
    return {
        "path": str(path),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "execution_id": execution_id,
        "export_type": export_type,
    }


# --- what a table must hold -----------------------------------------------------------------------


def normalise(column: str, value: Any) -> Any:
    """One comparable form for a CSV value and whatever a database returns for it."""
    if value is None or value == "":
        return None
    if column == "date":
        return value.isoformat() if isinstance(value, dt.date) else str(value)
    if column == "spend":
        return Decimal(str(value)).quantize(Decimal("0.01"))
    if column in COUNT_COLUMNS:
        return int(value)
    return str(value)


def expected(export_type: str, *loads: Iterable[Mapping[str, str]]) -> dict[tuple[str, ...], tuple[Any, ...]]:
    """One row per natural key; a later load's figures replace an earlier one's."""
    keys, columns = KEYS[export_type], COLUMNS[export_type]
    table: dict[tuple[str, ...], tuple[Any, ...]] = {}
    for rows in loads:
        for row in rows:
            table[tuple(row[k] for k in keys)] = tuple(normalise(c, row[c]) for c in columns)
    return table


def table_contents(cur: Any, table: str, export_type: str) -> dict[tuple[str, ...], tuple[Any, ...]]:
    """The loaded table keyed by natural key; fails on a duplicate key (that is a bug, not data)."""
    keys, columns = KEYS[export_type], COLUMNS[export_type]
    cur.execute(f"SELECT {', '.join(columns)} FROM {table}")
    out: dict[tuple[str, ...], tuple[Any, ...]] = {}
    for raw in cur.fetchall():
        row = tuple(normalise(c, v) for c, v in zip(columns, raw, strict=True))
        key = tuple(str(row[columns.index(k)]) for k in keys)
        assert key not in out, f"duplicate natural key {key} in {table}"
        out[key] = row
    return out
