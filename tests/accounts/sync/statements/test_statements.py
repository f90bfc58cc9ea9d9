"""``abm_provider.accounts.sync.statements``: every statement of every module renders for every registered
dialect, in every parameter style, with each value bound at its place and none written into the text.

Whether the SQL runs is the whole sync suite's to show, on DuckDB, PostgreSQL and MariaDB; here each
statement is built without a connection, so a dialect added to the registry is covered at once.
"""

from __future__ import annotations

import inspect
import re
from datetime import datetime
from types import ModuleType
from typing import Any, get_args

import pytest

from abm_provider.accounts.sync.state import StateTables
from abm_provider.accounts.sync.statements import plan, recording, runs, staging, tables
from abm_provider.accounts.sync.statements.binding import (
    Sql,
    param_style,
    sql,
    text,
)
from abm_provider.accounts.sync.statements.tables import StateSql, WorkTables
from abm_provider.accounts.validation import AccountValidator
from abm_provider.warehouse.dialects import DIALECTS, GENERIC, Dialect, _load
from abm_provider.warehouse.dialects.capabilities import ParamStyle
from abm_provider.warehouse.dialects.generic import GenericDialect

REGISTERED = sorted({*DIALECTS.values(), GENERIC})
STYLES: tuple[ParamStyle, ...] = get_args(ParamStyle)
#: The statements run for each row of values (``executemany``).
ROW_STATEMENTS = {"recording.insert_reject", "recording.insert_log_row"}
#: Values no statement holds as text: each must reach the driver bound.
LIST_ID = "list'1"
RUN_ID = "run?2"
AT = datetime(2026, 1, 2, 3, 4, 5)
TABLES = StateTables.named("abm_sync_", "state")


def _dialect(path: str) -> Dialect:
    return _load(path)(None)


def _every_statement(dialect: Dialect) -> dict[str, Sql]:
    """Every statement function of the statement modules, called once, by ``module.function``."""
    state = StateSql.of(dialect, TABLES)
    work = WorkTables.new(dialect, "state")
    validator = AccountValidator({"id": "a", "name": "b", "crmOrgId": "c", "crmType": "d"})
    fields = {"id": '"a"', "name": '"b"', "crmOrgId": '"c"', "crmType": '"d"'}
    texts = set(fields)
    held = plan.held_back(state, LIST_ID, AT)
    rows = plan.invalid_rows(work.stage, held.sendable)
    old_log = recording.old_log_rows(state, LIST_ID, AT, [RUN_ID, "r3"])
    plain = staging.plain(dialect, validator, fields, texts)
    staged = staging.staged_values(dialect, validator, fields, texts)
    return {
        "tables.create_work_table": tables.create_work_table(
            dialect, work.stage, staging.stage_columns_sql(dialect)
        ),
        "tables.create_work_table_as": tables.create_work_table_as(
            dialect, work.difference, staging.difference_shape(text(work.numbered), state.members)
        ),
        "tables.drop_table": tables.drop_table(work.stage),
        "staging.count": staging.count(text(work.numbered), staging.source_row()),
        "staging.source_row": staging.source_row(),
        "staging.plain": plain,
        "staging.staged_values": sql("{a}, {b}, {c}, {d}", **dict(zip("abcd", staged, strict=True))),
        "staging.insert_plain": staging.insert_plain(dialect, work.stage, text(work.numbered), staged, plain),
        "staging.other_rows": staging.other_rows(text(work.numbered), '"a", "b"', plain, 10, 500),
        "staging.page_after": staging.page_after(text(work.numbered), '"a"', 10, 500),
        "staging.difference_shape": staging.difference_shape(text(work.numbered), state.members),
        "staging.insert_difference": staging.insert_difference(
            work.difference, text(work.numbered), state.members, LIST_ID, staged
        ),
        "staging.members_left": staging.members_left(work.difference),
        "staging.equal_to_member": staging.equal_to_member(staged),
        "plan.has_rows": plan.has_rows(state.members, LIST_ID),
        "plan.held_back": held.held + held.sendable,
        "plan.repeated_key": plan.repeated_key(work.stage, valid_only=True),
        "plan.drop_repeated_keys": plan.drop_repeated_keys(work.candidates),
        "plan.stale_runs": plan.stale_runs(state, LIST_ID),
        "plan.delete_plans": plan.delete_plans(state, LIST_ID, [RUN_ID, "r3"]),
        "plan.delete_run": plan.delete_run(state, LIST_ID, RUN_ID),
        "plan.insert_candidates": plan.insert_candidates(
            state, work.candidates, work.stage, LIST_ID, listed=True
        ),
        "plan.insert_additions": plan.insert_additions(
            state, work.candidates, LIST_ID, RUN_ID, held.sendable
        ),
        "plan.insert_staged_additions": plan.insert_staged_additions(state, work.stage, LIST_ID, RUN_ID),
        "plan.insert_removals": plan.insert_removals(state, state.members, work.stage, LIST_ID, RUN_ID),
        "plan.planned_counts": plan.planned_counts(state, LIST_ID, RUN_ID),
        "plan.invalid_rows": rows,
        "plan.candidate_rows": plan.candidate_rows(work.candidates, held.held),
        "plan.insert_run": plan.insert_run(
            state,
            LIST_ID,
            RUN_ID,
            mode="mirror",
            status="sending",
            counts={"source_rows": 3, "to_add": 2, "to_remove": 1, "rejected": 0, "held": 0},
            started_at=AT,
        ),
        "plan.held_reason": plan.held_reason(state, LIST_ID),
        "plan.log_rows": plan.log_rows(
            state, rows, LIST_ID, RUN_ID, "held", plan.held_reason(state, LIST_ID), AT
        ),
        "plan.insert_rejects": plan.insert_rejects(state, rows, LIST_ID, RUN_ID, "invalid", AT),
        "plan.examples": plan.examples(work.stage, held.sendable, 5),
        "plan.sample": plan.sample(state, LIST_ID, RUN_ID, "add", 5),
        "recording.other_than": recording.other_than({3, 1}),
        "recording.delete_replaced_not_found": recording.delete_replaced_not_found(
            state, LIST_ID, RUN_ID, "add", 1, 1000
        ),
        "recording.insert_reject": recording.insert_reject(state),
        "recording.insert_members": recording.insert_members(
            state, LIST_ID, RUN_ID, 1, 1000, AT, recording.other_than({5}), new_only=True
        ),
        "recording.delete_members": recording.delete_members(
            state, LIST_ID, RUN_ID, "add", 1, 1000, recording.rejected_in_run(state)
        ),
        "recording.rejected_in_run": recording.rejected_in_run(state),
        "recording.log_from_plan": recording.log_from_plan(
            state, LIST_ID, RUN_ID, "remove", 1, 1000, Sql(), "removed", None, AT
        ),
        "recording.insert_log_row": recording.insert_log_row(state),
        "recording.delete_plan_rows": recording.delete_plan_rows(state, LIST_ID, RUN_ID, "add", 1, 1000),
        "recording.advance_run": recording.advance_run(
            state,
            LIST_ID,
            RUN_ID,
            "add",
            1000,
            {"rejected": 2, "added": 990, "duplicates": 5, "not_found": 3},
        ),
        "recording.has_old_not_found": recording.has_old_not_found(state, LIST_ID, RUN_ID, "add"),
        "recording.mark_done": recording.mark_done(state, LIST_ID, RUN_ID, AT),
        "recording.runs_started_before": recording.runs_started_before(state, LIST_ID, AT),
        "recording.old_log_rows": old_log,
        "recording.delete_rows": recording.delete_rows(old_log),
        "runs.unfinished_runs": runs.unfinished_runs(state, LIST_ID, "sending"),
        "runs.of_run": runs.of_run(LIST_ID, RUN_ID, row="p."),
        "runs.count_rows": runs.count_rows(old_log),
        "runs.plan_range": runs.plan_range(LIST_ID, RUN_ID, "add", 1, 1000, row="p."),
        "runs.plan_rows": runs.plan_rows(state, LIST_ID, RUN_ID, "add", 1, 1000),
        "runs.run_row": runs.run_row(state, LIST_ID, RUN_ID, ("to_add", "status")),
        "runs.member_counts": runs.member_counts(state, [LIST_ID, "other-list"]),
    }


def _statement_functions(module: ModuleType) -> set[str]:
    """The module's own public functions that return SQL."""
    return {
        f"{module.__name__.rpartition('.')[2]}.{name}"
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__ and not name.startswith("_")
    }


def test_every_statement_of_every_module_is_rendered_here() -> None:
    """A statement added to a module and not here would go unchecked on the dialects below."""
    rendered = set(_every_statement(GenericDialect(None)))
    wanted = set().union(*(_statement_functions(m) for m in (tables, staging, plan, recording, runs)))
    wanted -= {"staging.stage_columns_sql", "staging.staged_hash_sql", "plan.candidate_columns"}  # SQL text
    assert wanted == rendered


@pytest.mark.parametrize("path", REGISTERED, ids=lambda path: path.rpartition(".")[2])
@pytest.mark.parametrize("style", STYLES)
def test_each_statement_renders_for_every_registered_dialect_with_its_values_bound(
    path: str, style: ParamStyle
) -> None:
    dialect = _dialect(path)
    for name, statement in _every_statement(dialect).items():
        if name in ROW_STATEMENTS:
            sql_text, each_row = statement.bound_rows(style, [[LIST_ID, RUN_ID, *range(18)]])
            params = each_row[0]
        else:
            sql_text, params = statement.bound(style)
        assert LIST_ID not in sql_text and RUN_ID not in sql_text, name
        assert not re.search(r"\{[a-z_]+\}", sql_text), name  # no template field left
        marks = {"qmark": r"\?", "format": "%s", "named": r":p\d+", "pyformat": r"%\(p\d+\)s"}[style]
        found = re.findall(marks, sql_text)
        assert len(found) == len(params), name
        if isinstance(params, dict):
            assert [m.strip(":%()s") for m in found] == list(params), name


def test_the_dialects_declared_style_is_the_one_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    styles = {_dialect(path).name: param_style(_dialect(path)) for path in REGISTERED}
    assert styles == {
        "duckdb": "qmark",
        "postgres": "format",
        "mysql": "format",
        "snowflake": "format",
        "bigquery": "qmark",
        "generic": "format",
    }
    qmark = GenericDialect(None)
    qmark.placeholder = "?"
    assert param_style(qmark) == "qmark"
    qmark.placeholder = ":1"
    with pytest.raises(ValueError, match="placeholder, ':1', which is none of"):
        param_style(qmark)


def test_counts_go_into_the_text_by_name_only_as_the_runs_tables_count_columns() -> None:
    state = StateSql.of(GenericDialect(None), TABLES)
    with pytest.raises(ValueError, match=r"the runs table counts \[.*\], not \['added = 0; --'\]"):
        recording.advance_run(state, LIST_ID, RUN_ID, "add", 1, {"added = 0; --": 1})
    with pytest.raises(ValueError, match=r"not \['duplicate'\]"):
        plan.insert_run(
            state, LIST_ID, RUN_ID, mode="mirror", status="sending", counts={"duplicate": 1}, started_at=AT
        )


def _params_of(statement: Sql) -> list[Any]:
    found = statement.bound("qmark")[1]
    assert isinstance(found, list)
    return found


def test_members_are_deleted_by_a_join_only_where_the_dialect_declares_it() -> None:
    for path in REGISTERED:
        dialect = _dialect(path)
        state = StateSql.of(dialect, TABLES)
        statement = recording.delete_members(
            state, LIST_ID, RUN_ID, "remove", 1, 10, recording.other_than({4})
        )
        sql_text = statement.bound("qmark")[0]
        joined = sql_text.startswith(f"DELETE m FROM {state.members.bound('qmark')[0]} m JOIN")
        assert joined is dialect.capabilities.delete_using_join, dialect.name
        assert ("EXISTS" in sql_text) is not joined, dialect.name
        assert sql_text.endswith(" AND p.seq NOT IN (4)" + ("" if joined else ")"))
        assert _params_of(statement) == [LIST_ID, RUN_ID, 1, 10]
