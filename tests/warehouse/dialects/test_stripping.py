"""Each warehouse's ``strip_sql`` takes off exactly what Python's ``str.strip()`` takes off.

The account validator strips an id and an org with ``str.strip()``; the audience sync works out the
same keys in SQL (``statements.trimmed``) to tier, outrank and exclude accounts. A character one side
strips and the other keeps makes one account two: on two lists of a programme, or an excluded account
added. Here each dialect's SQL is run on its database against ``str.strip()``, character by character:
Snowflake's and BigQuery's on their emulators (fakesnow, bqemulator).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from abm_provider.warehouse.dialects import DIALECTS as REGISTRY
from abm_provider.warehouse.dialects import _load
from abm_provider.warehouse.dialects.bigquery import BigQueryDialect
from abm_provider.warehouse.dialects.duckdb import DuckDBDialect
from abm_provider.warehouse.dialects.mysql import MySQLDialect
from abm_provider.warehouse.dialects.postgres import PostgresDialect
from abm_provider.warehouse.dialects.snowflake import SnowflakeDialect
from abm_provider.warehouse.dialects.stripping import STRIPPED
from support.cloud_state import open_cloud
from support.warehouses import Warehouse, open_warehouse

DIALECTS = {"duckdb": DuckDBDialect, "postgres": PostgresDialect, "mariadb": MySQLDialect}
CLOUD = {"snowflake": SnowflakeDialect, "bigquery": BigQueryDialect}
#: Not whitespace to Python, so kept: a zero-width space, a no-break joiner, a letter, a control.
KEPT = ["\u200b", "\u2060", "\ufeff", "é", "\x7f", "\x1b"]


def _values() -> list[str]:
    values = ["", "a", " a ", "a b", "\t \n", "".join(STRIPPED), "".join(STRIPPED) + "a" + "".join(STRIPPED)]
    for c in STRIPPED:
        values += [f"{c}a", f"a{c}", f"{c}{c}a{c}b{c} {c}", f"{c}"]
    for c in KEPT:
        values += [f"{c}a{c}", f" {c}a{c} "]
    return values


@pytest.fixture(params=list(DIALECTS))
def database(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    with open_warehouse(request.param, tmp_path, monkeypatch) as found:
        yield found


def test_stripped_is_what_str_strip_takes_off() -> None:
    assert {c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()} == set(STRIPPED)
    assert all(c.strip() == "" for c in STRIPPED)


def test_each_database_strips_what_str_strip_strips(database: Warehouse) -> None:
    dialect = DIALECTS[database.kind]
    marker = "?" if database.kind == "duckdb" else "%s"
    expression = dialect.strip_sql(None, dialect.cast_sql(None, marker, "TEXT"))  # type: ignore[arg-type]
    found = {value: database.query(f"SELECT {expression}", [value])[0][0] for value in _values()}
    wrong = {value: got for value, got in found.items() if got != value.strip()}
    assert wrong == {}


@pytest.mark.parametrize("kind", list(CLOUD))
def test_each_cloud_database_strips_what_str_strip_strips(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every value in one query, each written as ``CHR`` of its characters (the clients bind no
    parameter the same way here)."""
    cloud = open_cloud(request, kind, monkeypatch)
    dialect = CLOUD[kind]
    values = _values()
    written = [" || ".join(f"CHR({ord(c)})" for c in value) or "''" for value in values]
    stripped = ", ".join(dialect.strip_sql(None, value) for value in written)  # type: ignore[arg-type]
    found = cloud.query(f"SELECT {stripped}")[0]
    wrong = {value: got for value, got in zip(values, found, strict=True) if got != value.strip()}
    assert wrong == {}


def test_every_dialect_declaring_it_strips_like_python_is_proven_here() -> None:
    """The audience sync trusts a dialect's grouping of keys when it declares ``strips_like_python``:
    each that declares it is run against ``str.strip()`` above, and each run above declares it."""
    declared = {cls for cls in map(_load, set(REGISTRY.values())) if cls.capabilities.strips_like_python}
    assert declared == set(DIALECTS.values()) | set(CLOUD.values())
