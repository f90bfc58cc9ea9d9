"""Export CSVs written by the tests themselves, and reading a loaded table back in a comparable form."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

TACTIC_COLUMNS = [
    "date",
    "campaign_id",
    "campaign_name",
    "tactic_id",
    "tactic_name",
    "impressions",
    "clicks",
    "spend",
]
ACCOUNT_COLUMNS = [
    "date",
    "tactic_id",
    "tactic_name",
    "account_id",
    "account_name",
    "crm_org_id",
    "impressions",
    "clicks",
    "spend",
    "page_views",
    "engaged_visitors",
]
KEYS = {
    "TACTIC_PERFORMANCE": ("date", "tactic_id"),
    "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE": ("date", "tactic_id", "account_id"),
}
NAMES = ['Spring, "Launch"', "Café Münster", "Ørsted ÆØÅ", "plain", "multi\nline", "日本語 キャンペーン"]


def tactic_rows(
    days: Sequence[dt.date], tactics: int, *, version: int, seed: int = 1
) -> list[dict[str, str]]:
    """TACTIC_PERFORMANCE rows; ``version`` changes every figure, as a restatement does."""
    rows = []
    for day in days:
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


def account_rows(
    days: Sequence[dt.date], tactics: int, accounts: int, *, version: int
) -> list[dict[str, str]]:
    rows = []
    for day in days:
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


def days(start: dt.date, count: int) -> list[dt.date]:
    return [start + dt.timedelta(days=i) for i in range(count)]


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([row[c] for c in columns])
    return path


def download_xcom(path: Path, execution_id: str, export_type: str = "TACTIC_PERFORMANCE") -> dict[str, Any]:
    """What the download operator hands over: path, size, checksum, execution id, type."""
    data = path.read_bytes()
    return {
        "path": str(path),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "execution_id": execution_id,
        "export_type": export_type,
    }


def expected(export_type: str, *loads: Iterable[Mapping[str, str]]) -> dict[tuple[str, ...], tuple[Any, ...]]:
    """Independent expectation: one row per natural key, the latest load's figures win."""
    keys = KEYS[export_type]
    columns = TACTIC_COLUMNS if export_type == "TACTIC_PERFORMANCE" else ACCOUNT_COLUMNS
    table: dict[tuple[str, ...], tuple[Any, ...]] = {}
    for rows in loads:
        for row in rows:
            table[tuple(row[k] for k in keys)] = tuple(normalise(c, row[c]) for c in columns)
    return table


def normalise(column: str, value: Any) -> Any:
    """One comparable form for what the CSV says and what each database returns."""
    if value is None or value == "":
        return None
    if column == "date":
        return value.isoformat() if isinstance(value, dt.date) else str(value)
    if column == "spend":
        return Decimal(str(value)).quantize(Decimal("0.01"))
    if column in {"impressions", "clicks", "page_views", "engaged_visitors"}:
        return int(value)
    return str(value)


def table_contents(cur: Any, table: str, export_type: str) -> dict[tuple[str, ...], tuple[Any, ...]]:
    """The loaded table keyed by natural key; fails on a duplicate key (that is a bug, not data)."""
    keys = KEYS[export_type]
    columns = TACTIC_COLUMNS if export_type == "TACTIC_PERFORMANCE" else ACCOUNT_COLUMNS
    cur.execute(f"SELECT {', '.join(columns)} FROM {table}")
    out: dict[tuple[str, ...], tuple[Any, ...]] = {}
    for raw in cur.fetchall():
        row = tuple(normalise(c, v) for c, v in zip(columns, raw, strict=True))
        key = tuple(str(row[columns.index(k)]) for k in keys)
        assert key not in out, f"duplicate natural key {key} in {table}"
        out[key] = row
    return out


def duckdb_conn_env(path: Path, **extra: Any) -> str:
    return json.dumps({"conn_type": "duckdb", "host": str(path), "extra": extra})


def mysql_conn_env(database: str = "test") -> str:
    return json.dumps(
        {"conn_type": "mysql", "host": "127.0.0.1", "port": 3306, "login": "root", "schema": database}
    )


def postgres_conn_env(schema: str = "test") -> str:
    return json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": 5432, "login": "postgres", "schema": schema}
    )
