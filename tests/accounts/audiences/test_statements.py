"""``abm_provider.accounts.audiences.statements`` and ``.move_statements``: every statement of the
audience sync renders for every registered dialect, in every parameter style, with each value bound at
its place and none written into the text.

Whether the SQL runs is the audience engine suite's to show (DuckDB, PostgreSQL, MariaDB); here each
statement is built without a connection, so a dialect added to the registry is covered at once.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import replace
from datetime import datetime
from typing import Any, get_args

import pytest

from abm_provider.accounts.audiences import move_statements, statements
from abm_provider.accounts.audiences.moves import moves_table
from abm_provider.accounts.sync.state import BLOCKED, DRY_RUN, StateTables
from abm_provider.accounts.sync.statements.binding import Sql, sql, text
from abm_provider.accounts.sync.statements.tables import StateSql, WorkTables
from abm_provider.warehouse.dialects import DIALECTS, GENERIC, Dialect, _load
from abm_provider.warehouse.dialects.capabilities import ParamStyle
from abm_provider.warehouse.dialects.generic import GenericDialect
from abm_provider.warehouse.schema import TableName

REGISTERED = sorted({*DIALECTS.values(), GENERIC})
STYLES: tuple[ParamStyle, ...] = get_args(ParamStyle)
#: Values no statement holds as text: each must reach the driver bound. A quote would end a literal
#: written into the text, and a ``?`` would be read as a marker.
LIST_ID = "list'1"
RUN_ID = "run?2"
OTHER_LIST = "list?3"
TIERS = ("tier'A", "tier?B")
ORG = "org'C"
AT = datetime(2026, 1, 2, 3, 4, 5)
LISTS = [LIST_ID, OTHER_LIST]
VALUES = (LIST_ID, RUN_ID, OTHER_LIST, *TIERS, ORG)
TABLES = StateTables.named("abm_sync_", "state")
#: The functions that return SQL text with no value to bind (read in place, or a table's columns).
TEXT_FUNCTIONS = {
    "excluded_columns",
    "removed_columns",
    "outranked_columns",
    "changed_columns",
    "outranked_join",
    "trimmed",
    "assigned",
    "create_moves",
}


def _dialect(path: str) -> Dialect:
    return _load(path)(None)


def _work(dialect: Dialect, name: str) -> str:
    """A work table's name as the audience sync writes it."""
    if dialect.capabilities.temporary_tables:
        return f"abm_sync_{name}"
    return dialect.table_sql(TableName("state", f"abm_sync_{name}"))


def _every_statement(dialect: Dialect) -> dict[str, tuple[Sql, tuple[Any, ...]]]:
    """Every statement function, called once (``tiered`` once per way it finds an account's org), by
    name, with the values it was given to bind."""
    state = StateSql.of(dialect, TABLES)
    numbered = text(WorkTables.new(dialect, "state").numbered)
    excluded, tiered_table, removed = _work(dialect, "excl"), _work(dialect, "tiered"), _work(dialect, "gone")
    added = _work(dialect, "came")
    outranked, changed = _work(dialect, "best"), _work(dialect, "chg")
    moves = dialect.table_sql(moves_table(TABLES))
    rows = sql("(SELECT * FROM src WHERE list_id = {list_id})", list_id=LIST_ID)
    staged = [text("t.a"), sql("COALESCE(t.o, {org})", org=ORG), text("t.c"), text("t.n")]
    keys = statements.RowKeys("tier", TIERS, "account id", "org", ORG)
    no_org = statements.RowKeys("tier", TIERS, "account id", None, None)
    return {
        "insert_excluded": (statements.insert_excluded(dialect, excluded, rows, "account id"), (LIST_ID,)),
        "insert_excluded_members": (
            statements.insert_excluded_members(state, excluded, LISTS),
            (LIST_ID, OTHER_LIST),
        ),
        "tiered": (statements.tiered(dialect, numbered, excluded, keys), (*TIERS, ORG)),
        "tiered default_org": (
            statements.tiered(dialect, numbered, excluded, replace(keys, org_column=None)),
            (*TIERS, ORG),
        ),
        "tiered no org": (statements.tiered(dialect, numbered, excluded, no_org), TIERS),
        "tier_counts": (statements.tier_counts(tiered_table, outranked), ()),
        "by_place": (statements.by_place(dialect, "m.list_id", LISTS, to_list=False), (LIST_ID, OTHER_LIST)),
        "insert_changed": (
            statements.insert_changed(state, changed, rows, excluded, no_org, LISTS, staged),
            (*TIERS, LIST_ID, LIST_ID, OTHER_LIST, LIST_ID, OTHER_LIST, ORG, ORG),
        ),
        "tiered changed": (
            statements.tiered(dialect, numbered, excluded, keys, changed),
            (*TIERS, ORG),
        ),
        "insert_changed_keys": (statements.insert_changed_keys(changed), ()),
        "changed_accounts": (statements.changed_accounts(changed), ()),
        "changed_members": (statements.changed_members(state, changed, LISTS), (LIST_ID, OTHER_LIST)),
        "changed_member_counts": (statements.changed_member_counts(changed), ()),
        "insert_outranked": (statements.insert_outranked(dialect, tiered_table, outranked), ()),
        "any_outranked": (statements.any_outranked(outranked), ()),
        "unmapped_sample": (statements.unmapped_sample(dialect, tiered_table, "tier", 5), ()),
        "delete_moves": (move_statements.delete_moves(moves, RUN_ID, LISTS), (RUN_ID, LIST_ID, OTHER_LIST)),
        "delete_kept_moves": (
            move_statements.delete_kept_moves(state, moves, RUN_ID, LISTS),
            (RUN_ID, LIST_ID, OTHER_LIST, LIST_ID, OTHER_LIST, LIST_ID, OTHER_LIST, BLOCKED, DRY_RUN),
        ),
        "insert_removed": (
            move_statements.insert_removed(state, removed, RUN_ID, LISTS),
            (LIST_ID, OTHER_LIST, LIST_ID, OTHER_LIST, RUN_ID),
        ),
        "insert_added": (
            move_statements.insert_added(state, added, RUN_ID, LISTS),
            (LIST_ID, OTHER_LIST, LIST_ID, OTHER_LIST, RUN_ID),
        ),
        "insert_moved": (
            move_statements.insert_moved(
                dialect, moves, removed, added, tiered_table, outranked, RUN_ID, LISTS, AT
            ),
            (RUN_ID, move_statements.MOVED, LIST_ID, OTHER_LIST, AT),
        ),
        "insert_excluded_from": (
            move_statements.insert_excluded_from(dialect, moves, removed, excluded, RUN_ID, AT),
            (RUN_ID, move_statements.EXCLUDED_FROM, AT),
        ),
        "insert_kept_off": (
            move_statements.insert_kept_off(
                dialect, moves, removed, tiered_table, outranked, RUN_ID, LISTS, AT
            ),
            (RUN_ID, move_statements.KEPT_OFF, LIST_ID, OTHER_LIST, AT),
        ),
        "move_counts": (move_statements.move_counts(moves, RUN_ID, LISTS), (RUN_ID, LIST_ID, OTHER_LIST)),
        "move_sample": (
            move_statements.move_sample(moves, RUN_ID, LIST_ID, OTHER_LIST, 5),
            (RUN_ID, LIST_ID, OTHER_LIST),
        ),
        "refused_in_run": (
            move_statements.refused_in_run(state, RUN_ID, LISTS),
            (RUN_ID, LIST_ID, OTHER_LIST),
        ),
        "mark_waiting": (
            move_statements.mark_waiting(state, moves, RUN_ID, LIST_ID),
            (move_statements.WAITING, RUN_ID, move_statements.MOVED, LIST_ID, LIST_ID, RUN_ID),
        ),
        "mark_refused": (
            move_statements.mark_refused(state, moves, RUN_ID, LIST_ID),
            (move_statements.REFUSED, RUN_ID, move_statements.MOVED, LIST_ID),
        ),
        "count_waiting": (
            move_statements.count_waiting(moves, RUN_ID, LIST_ID),
            (RUN_ID, move_statements.WAITING, LIST_ID),
        ),
        "waiting_rows": (
            move_statements.waiting_rows(state, moves, RUN_ID, LIST_ID, 3, 9),
            (LIST_ID, RUN_ID, "add", 3, 9, move_statements.WAITING),
        ),
        "forget_moves": (
            move_statements.forget_moves(moves, AT, LISTS),
            (AT, LIST_ID, OTHER_LIST, LIST_ID, OTHER_LIST),
        ),
    }


def _texts(dialect: Dialect) -> dict[str, Any]:
    """What each SQL-text function returns, by name."""
    return {
        "excluded_columns": statements.excluded_columns(dialect),
        "removed_columns": move_statements.removed_columns(dialect),
        "outranked_columns": statements.outranked_columns(dialect),
        "outranked_join": statements.outranked_join(_work(dialect, "best")),
        "changed_columns": statements.changed_columns(dialect),
        "trimmed": statements.trimmed(dialect, dialect.quote("account id")),
        "assigned": statements.assigned(_work(dialect, "tiered"), _work(dialect, "best"), 2, '"a", "b"'),
        "create_moves": move_statements.create_moves(dialect, dialect.table_sql(moves_table(TABLES))),
    }


def test_every_public_function_of_the_modules_is_rendered_here() -> None:
    """A statement added to the modules and not here would go unchecked on the dialects below."""
    dialect = GenericDialect(None)
    wanted = {
        name
        for module in (statements, move_statements)
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__ and not name.startswith("_")
    }
    rendered = {name.partition(" ")[0] for name in _every_statement(dialect)}
    assert rendered.isdisjoint(TEXT_FUNCTIONS)
    assert wanted == rendered | set(_texts(dialect))


@pytest.mark.parametrize("path", REGISTERED, ids=lambda path: path.rpartition(".")[2])
@pytest.mark.parametrize("style", STYLES)
def test_each_statement_renders_for_every_registered_dialect_with_its_values_bound(
    path: str, style: ParamStyle
) -> None:
    dialect = _dialect(path)
    marks = {"qmark": r"\?", "format": "%s", "named": r":p\d+", "pyformat": r"%\(p\d+\)s"}[style]
    for name, (statement, given) in _every_statement(dialect).items():
        sql_text, params = statement.bound(style)
        assert not [v for v in VALUES if v in sql_text], name
        assert not re.search(r"\{[a-z_]+\}", sql_text), name  # no template field left
        found = re.findall(marks, sql_text)
        assert len(found) == len(params), name
        bound = list(params.values()) if isinstance(params, dict) else params
        if isinstance(params, dict):
            assert [m.strip(":%()s") for m in found] == list(params), name
        assert all(value in bound for value in given), name


@pytest.mark.parametrize("path", REGISTERED, ids=lambda path: path.rpartition(".")[2])
def test_the_sql_text_functions_give_text_with_no_value_in_it(path: str) -> None:
    dialect = _dialect(path)
    for name, written in _texts(dialect).items():
        assert isinstance(written, str), name
        assert not [v for v in VALUES if v in written], name
        assert not re.search(r"\{[a-z_]+\}", written), name
    assigned = statements.assigned("tiers", "best", 2, "a")
    assert f"WHERE t.{statements.LIST} = 2 AND t.{statements.EXCLUDED} = 0" in assigned
    assert f"o.{statements.BEST} < t.{statements.LIST}" in assigned


def _params(statement: Sql) -> list[Any]:
    found = statement.bound("qmark")[1]
    assert isinstance(found, list)
    return found


@pytest.mark.parametrize("path", REGISTERED, ids=lambda path: path.rpartition(".")[2])
def test_the_audiences_are_bound_in_priority_order_each_given_its_place(path: str) -> None:
    """The place a row's audience is given is its list's place in the programme: the n-th value bound
    is compared against, and stands for, place n."""
    dialect = _dialect(path)
    statement = _every_statement(dialect)["tiered"][0]
    sql_text = statement.bound("qmark")[0]
    assert _params(statement) == [*TIERS, ORG]
    whens = re.findall(r"WHEN (.*?) THEN (\d+)", sql_text.split(" END AS ")[0])
    assert [place for _, place in whens] == ["1", "2"]
    assert all("?" in value for value, _ in whens)


def test_a_kept_off_account_is_logged_with_its_best_audience_s_list_bound_in_order() -> None:
    dialect = GenericDialect(None)
    statement = move_statements.insert_kept_off(dialect, "moves", "gone", "tiered", "best", RUN_ID, LISTS, AT)
    assert _params(statement) == [RUN_ID, move_statements.KEPT_OFF, LIST_ID, OTHER_LIST, AT]
    sql_text = statement.bound("qmark")[0]
    assert re.search(r"WHEN 1 THEN .*\?.* WHEN 2 THEN .*\?", sql_text)


def test_a_removal_is_given_its_list_s_place_in_priority_order() -> None:
    state = StateSql.of(GenericDialect(None), TABLES)
    statement = move_statements.insert_removed(state, "gone", RUN_ID, LISTS)
    assert _params(statement) == [LIST_ID, OTHER_LIST, LIST_ID, OTHER_LIST, RUN_ID]
    sql_text = statement.bound("qmark")[0]
    assert re.search(r"CASE p.list_id WHEN .*\? .*THEN 1 WHEN .*\? .*THEN 2 END", sql_text)


def test_a_move_sample_s_count_is_written_as_a_number_only() -> None:
    statement = move_statements.move_sample("moves", RUN_ID, LIST_ID, OTHER_LIST, 7)
    sql_text, params = statement.bound("format")
    assert sql_text.endswith("ORDER BY account_id LIMIT 7")
    assert params == [RUN_ID, move_statements.MOVED, LIST_ID, OTHER_LIST]
    with pytest.raises(ValueError, match="invalid literal for int"):
        move_statements.move_sample("moves", RUN_ID, LIST_ID, OTHER_LIST, "7; DROP TABLE x")  # type: ignore[arg-type]
