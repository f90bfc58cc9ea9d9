"""The user's SQL as the provider embeds it: one statement, its terminator left out, nothing else changed."""

from __future__ import annotations

import pytest

from abm_provider.common.sql import one_statement


@pytest.mark.parametrize(
    ("sql", "statement"),
    [
        ("SELECT 1", "SELECT 1"),
        ("SELECT 1;", "SELECT 1"),
        ("SELECT 1 ;  \n", "SELECT 1"),
        ("SELECT 1; -- done", "SELECT 1"),
        ("SELECT 1 /* a */ ; /* b */\n", "SELECT 1"),
        ("SELECT 1\n-- a comment with a ; in it\n;", "SELECT 1"),
        (
            "-- first the header\nWITH a AS (SELECT 1) SELECT * FROM a;",
            "-- first the header\nWITH a AS (SELECT 1) SELECT * FROM a",
        ),
        ("SELECT ';' AS x, '--' AS y;", "SELECT ';' AS x, '--' AS y"),
        (
            "SELECT * FROM t WHERE n LIKE 'Acme%' AND q = '?' -- what?\n",
            "SELECT * FROM t WHERE n LIKE 'Acme%' AND q = '?'",
        ),
        ("SELECT * FROM t WHERE attrs ? 'tier1'", "SELECT * FROM t WHERE attrs ? 'tier1'"),
    ],
)
def test_one_statement_leaves_out_only_the_terminator_and_what_follows_it(sql: str, statement: str) -> None:
    assert one_statement(sql) == statement


@pytest.mark.parametrize(
    "sql", ["", "  ;  ", "-- only a comment", "SELECT 1; SELECT 2", "SET x = 1; SELECT 1;"]
)
def test_no_statement_or_several_is_none(sql: str) -> None:
    assert one_statement(sql) is None
