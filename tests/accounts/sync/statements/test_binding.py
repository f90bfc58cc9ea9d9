"""``abm_provider.accounts.sync.statements.binding``: a statement's values keep their places, whatever
the fragments it is built from, and are bound in each parameter style, never written into the text.
"""

from __future__ import annotations

import pytest

from abm_provider.accounts.sync.statements.binding import (
    around,
    row_values,
    sql,
    text,
    values,
)


def test_values_keep_their_places_however_fragments_are_put_together() -> None:
    where = sql("a = {a}", a=1) + sql(" AND b IN ({bs})", bs=values(["x", "y"]))
    statement = sql("SELECT {c} FROM t WHERE {where} AND d = {d}", c=text('"c?"'), where=where, d=None)
    assert statement.bound("qmark") == (
        'SELECT "c?" FROM t WHERE a = ? AND b IN (?, ?) AND d = ?',
        [1, "x", "y", None],
    )
    assert statement.bound("format") == (
        'SELECT "c?" FROM t WHERE a = %s AND b IN (%s, %s) AND d = %s',
        [1, "x", "y", None],
    )
    assert statement.bound("named") == (
        'SELECT "c?" FROM t WHERE a = :p1 AND b IN (:p2, :p3) AND d = :p4',
        {"p1": 1, "p2": "x", "p3": "y", "p4": None},
    )
    assert (
        statement.bound("pyformat")[0]
        == 'SELECT "c?" FROM t WHERE a = %(p1)s AND b IN (%(p2)s, %(p3)s) AND d = %(p4)s'
    )


def test_a_statement_run_for_each_row_binds_each_row_and_its_own_values() -> None:
    statement = sql("INSERT INTO t VALUES ({row}, {at})", row=row_values(2), at="now")
    assert statement.bound_rows("named", [[1, "a"], [2, "b"]]) == (
        "INSERT INTO t VALUES (:p1, :p2, :p3)",
        [{"p1": 1, "p2": "a", "p3": "now"}, {"p1": 2, "p2": "b", "p3": "now"}],
    )
    with pytest.raises(ValueError, match="bound_rows"):
        statement.bound("qmark")


def test_a_template_field_without_a_value_or_with_a_format_is_refused() -> None:
    with pytest.raises(ValueError, match="field {b} has no value"):
        sql("SELECT {a}, {b}", a=1)
    with pytest.raises(ValueError, match="format of its own"):
        sql("SELECT {a!r}", a=1)
    assert sql("SELECT '{{x}}' FROM t WHERE a = {a}", a=1).bound("qmark") == (
        "SELECT '{x}' FROM t WHERE a = ?",
        [1],
    )


def test_a_dialects_expression_wraps_a_bound_value_once() -> None:
    typed = around(lambda e: f"CAST({e} AS TEXT)", sql("{v}", v="x"))
    assert typed.bound("format") == ("CAST(%s AS TEXT)", ["x"])
    with pytest.raises(ValueError, match="exactly once"):
        around(lambda e: f"COALESCE({e}, {e})", sql("{v}", v="x"))
