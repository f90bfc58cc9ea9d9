"""Each warehouse's SQL form of a column rule accepts exactly the values the Python rule accepts.

DuckDB and PostgreSQL evaluate each rule in SQL (``valid_sql``: the pattern plus a calendar check),
and PostgreSQL first tries a cheaper test of character classes and lengths (``_value_passes_sql``). A
value one side accepts and the other refuses would load on one warehouse and be a reject on another,
or reach a cast that fails the whole load. Here each SQL form is held to
:func:`abm_provider.warehouse.schema.convert`, value by value, on spellings around each rule's edges,
and read the way the loader reads it: ``reason_sql`` rejects a value only where ``valid_sql`` is
false (NULL would let it through), while the quick test passes a value only where it is true.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abm_provider.warehouse.dialects.duckdb import DuckDBDialect
from abm_provider.warehouse.dialects.postgres import PostgresDialect, _value_passes_sql
from abm_provider.warehouse.schema import Kind, convert

# The fixtures this module uses.
from support.warehouses import pg_conn

__all__ = ["pg_conn"]

TYPED = [Kind.DATE, Kind.COUNT, Kind.MONEY]
#: Characters the databases' casts are lenient about: signs, spaces, separators, exponents, hex.
_NOISE = st.text(alphabet="0123456789-+. /:Tex_", max_size=22)


def _dates() -> st.SearchStrategy[str]:
    iso = st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)).map(dt.date.isoformat)
    return st.one_of(
        iso,
        iso.map(lambda s: s.replace("-", "/")),
        iso.map(lambda s: s[:8] + str(int(s[8:]))),  # 2026-10-3
        iso.map(lambda s: "0000" + s[4:]),  # year 0
        iso.map(lambda s: f" {s}"),
        iso.map(lambda s: f"{s}T00:00"),
        iso.map(lambda s: "+" + s),
        iso.map(lambda s: "-" + s),
        st.sampled_from(["2026-02-29", "2024-02-29", "2026-04-31", "20260-10-03", "10000-01-01", "26-01-05"]),
        _NOISE,
    )


def _counts() -> st.SearchStrategy[str]:
    number = st.integers(-(10**20), 10**20)
    return st.one_of(
        number.map(str),
        number.map(lambda n: f"0{abs(n)}"),  # leading zeros
        number.map(lambda n: f"-0{abs(n)}"),
        number.map(lambda n: f"+{abs(n)}"),
        st.sampled_from(["-0", "0x10", "1e3", "1_000", " 7", "7 ", "9" * 18, "-" + "9" * 18, "9" * 19]),
        _NOISE,
    )


def _money() -> st.SearchStrategy[str]:
    cents = st.integers(-(10**19), 10**19)
    return st.one_of(
        cents.map(lambda c: f"{'-' if c < 0 else ''}{abs(c) // 100}.{abs(c) % 100:02d}"),
        cents.map(lambda c: f"{c / 10:.1f}"),
        cents.map(lambda c: f"{c / 1000:.3f}"),  # three places
        cents.map(str),
        st.sampled_from(
            ["-0.00", "1.", ".5", "-.5", "01.50", "1e3", "+1.00", " 1.00", "9" * 16 + ".99", "9" * 17]
        ),
        _NOISE,
    )


VALUES = {Kind.DATE: _dates(), Kind.COUNT: _counts(), Kind.MONEY: _money()}


def _accepted(kind: Kind, text: str) -> bool:
    try:
        convert(kind, text)
    except ValueError:
        return False
    return True


def _agree(evaluate: Callable[[str, list[str]], list[Any]], kind: Kind, values: list[str]) -> None:
    got = evaluate(kind.value, values)
    wrong = [(v, g) for v, g in zip(values, got, strict=True) if bool(g) is not _accepted(kind, v)]
    assert not wrong, f"{kind.value}: SQL and the Python rule disagree on {wrong}"


@pytest.fixture(scope="module")
def duckdb_rule() -> Callable[[str, list[str]], list[Any]]:
    import duckdb

    con = duckdb.connect()
    loader = DuckDBDialect(None)

    def evaluate(kind: str, values: list[str]) -> list[Any]:
        check = loader.valid_sql("v", Kind(kind))
        rows = con.execute(
            f"SELECT n, ({check}) IS NOT FALSE FROM (SELECT unnest(?) AS v, generate_subscripts(?, 1) AS n) "
            "ORDER BY n",
            [values, values],
        ).fetchall()
        return [r[1] for r in rows]

    return evaluate


@pytest.fixture(scope="module")
def postgres_rules(pg_conn: Any) -> dict[str, Callable[[str, list[str]], list[Any]]]:
    loader = PostgresDialect(None)

    def evaluate(check_of: Callable[[str, Kind], str], accepts: str) -> Callable[[str, list[str]], list[Any]]:
        def run(kind: str, values: list[str]) -> list[Any]:
            check = accepts.format(check_of("v", Kind(kind)))
            rows = pg_conn.execute(
                f"SELECT {check} FROM unnest(%s::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n",
                [values],
            ).fetchall()
            return [r[0] for r in rows]

        return run

    return {
        "valid_sql": evaluate(loader.valid_sql, "({}) IS NOT FALSE"),
        "passes_sql": evaluate(_value_passes_sql, "COALESCE({}, false)"),
    }


@pytest.mark.parametrize("kind", TYPED, ids=lambda k: k.value)
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.data())
def test_duckdb_rules_agree_with_the_python_rules(duckdb_rule, kind, data):
    values = data.draw(st.lists(VALUES[kind], min_size=1, max_size=40))
    _agree(duckdb_rule, kind, values)


@pytest.mark.parametrize("check", ["valid_sql", "passes_sql"])
@pytest.mark.parametrize("kind", TYPED, ids=lambda k: k.value)
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.data())
def test_postgres_rules_agree_with_the_python_rules(postgres_rules, check, kind, data):
    values = data.draw(st.lists(VALUES[kind], min_size=1, max_size=40))
    _agree(postgres_rules[check], kind, values)
