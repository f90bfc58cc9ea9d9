"""Statements that write a run's plan (:mod:`~abm_provider.accounts.sync.plan` runs them): the rows that may
be added, the plan's additions and removals, the refused rows held back, the run's row, and what the log
shows of the plan.

``s`` is a staged (or candidate) source row throughout, ``m`` a member and ``r`` a reject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.accounts.sync.state import (
    BLOCKED,
    DRY_RUN,
    KEY_LENGTH,
    LOG_COLUMNS,
    NOT_FOUND_ACTION,
    REJECTS_COLUMNS,
    RUN_COUNTS,
    check_run_counts,
)
from abm_provider.accounts.sync.statements.binding import Sql, join, sql, text, values
from abm_provider.accounts.sync.statements.runs import of_run
from abm_provider.accounts.sync.statements.staging import staged_hash_sql

if TYPE_CHECKING:
    from datetime import datetime

    from abm_provider.accounts.sync.statements.tables import StateSql
    from abm_provider.warehouse.dialects import Dialect

#: A plan row's account, as the plan table, a candidate ``s`` and a member ``m`` have it.
_ACCOUNT_COLUMNS = ("account_id", "crm_org_id", "crm_type", "account_name", "row_hash")


@dataclass(frozen=True)
class Held:
    """Conditions on a source row ``s``: ``held`` when refused before with its values and still held,
    ``sendable`` when not."""

    held: Sql
    sendable: Sql


#: What a list with no rejects holds: nothing, without looking each row up in the rejects table.
NOTHING_HELD = Held(text("1 = 0"), text("1 = 1"))


def has_rows(table: Sql, list_id: str) -> Sql:
    """One row when ``table`` has a row of the list, else none."""
    return sql("SELECT 1 FROM {table} WHERE list_id = {list_id} LIMIT 1", table=table, list_id=list_id)


def candidate_columns(dialect: Dialect) -> str:
    """The columns of the work table of the rows that may be added."""
    key, hashed = dialect.text_sql(KEY_LENGTH), dialect.text_sql(64)
    return (
        f"record BIGINT, account_id {key}, crm_org_id {key}, crm_type {key}, account_name {key}, "
        f"row_hash {hashed}"
    )


def held_back(state: StateSql, list_id: str, not_found_before: datetime | None) -> Held:
    """Rows refused before with the same values, still held: an account the service did not find only
    until ``not_found_before`` (``None``: until its values change)."""
    held = state.sql(
        "SELECT 1 FROM {rejects} r WHERE r.list_id = {list_id} AND r.row_hash = s.row_hash", list_id=list_id
    )
    if not_found_before is not None:
        held += sql(
            " AND (r.action <> {not_found} OR r.recorded_at > {cutoff})",
            not_found=NOT_FOUND_ACTION,
            cutoff=not_found_before,
        )
    return Held(sql("EXISTS ({held})", held=held), sql("NOT EXISTS ({held})", held=held))


def repeated_key(rows: str, *, valid_only: bool = False) -> Sql:
    """One row when a key occurs twice among ``rows`` (the candidates, or with ``valid_only`` the valid
    rows of a stage), else none."""
    where = " WHERE reason IS NULL" if valid_only else ""
    return text(f"SELECT 1 FROM {rows}{where} GROUP BY account_id, crm_org_id HAVING COUNT(*) > 1 LIMIT 1")


def drop_repeated_keys(candidates: str) -> Sql:
    """Delete every row of ``candidates`` but the first in the source of each key.

    The later rows are found through a derived table, which MySQL and MariaDB materialise instead of
    grouping again for every row deleted.
    """
    return text(
        f"DELETE FROM {candidates} WHERE record IN (SELECT d.record FROM (SELECT c.record, "
        "ROW_NUMBER() OVER (PARTITION BY c.account_id, c.crm_org_id ORDER BY c.record) AS nth "
        f"FROM {candidates} c) d WHERE d.nth > 1)"
    )


def stale_runs(state: StateSql, list_id: str) -> Sql:
    """The list's runs whose plan was kept only to be read: stopped by a guard, or dry."""
    return state.sql(
        "SELECT run_id FROM {runs} WHERE list_id = {list_id} AND status IN ({statuses})",
        list_id=list_id,
        statuses=values([BLOCKED, DRY_RUN]),
    )


def delete_plans(state: StateSql, list_id: str, run_ids: list[str]) -> Sql:
    """Delete the plans of these runs of the list (named one by one: reached through the plan's index)."""
    return state.sql(
        "DELETE FROM {plan} WHERE list_id = {list_id} AND run_id IN ({run_ids})",
        list_id=list_id,
        run_ids=values(run_ids),
    )


def delete_run(state: StateSql, list_id: str, run_id: str) -> Sql:
    """Delete a run's row."""
    return state.sql("DELETE FROM {runs} WHERE {run}", run=of_run(list_id, run_id))


def insert_candidates(state: StateSql, candidates: str, stage: str, list_id: str, *, listed: bool) -> Sql:
    """Fill ``candidates`` with the valid staged rows, less those whose key is a member when ``listed``.

    A row staged in SQL gets its hash here, where only these rows need one.
    """
    insert = sql(
        "INSERT INTO {candidates} (record, account_id, crm_org_id, crm_type, account_name, row_hash) "
        "SELECT s.record, s.account_id, s.crm_org_id, s.crm_type, s.account_name, {hashed} "
        "FROM {stage} s WHERE s.reason IS NULL",
        candidates=text(candidates),
        hashed=text(staged_hash_sql(state.dialect)),
        stage=text(stage),
    )
    if not listed:
        return insert
    return insert + state.sql(
        " AND NOT EXISTS (SELECT 1 FROM {members} m WHERE m.list_id = {list_id} "
        "AND m.account_id = s.account_id AND m.crm_org_id = s.crm_org_id)",
        list_id=list_id,
    )


def _insert_for_run(
    table: Sql, columns: Sequence[str], list_id: str, run_id: str, picked: Sql, rows: Sql
) -> Sql:
    """Insert into ``table`` a row of the run for each of ``rows`` (a ``FROM ...`` clause): its list and
    run, then the rest of ``columns`` as ``picked`` fills them."""
    return sql(
        "INSERT INTO {table} ({columns}) SELECT {list_id}, {run_id}, {picked} {rows}",
        table=table,
        columns=text(", ".join(columns)),
        list_id=list_id,
        run_id=run_id,
        picked=picked,
        rows=rows,
    )


def _insert_plan(
    state: StateSql,
    list_id: str,
    run_id: str,
    action: str,
    order: str,
    rows: Sql,
    *,
    row: str,
    hashed: str | None = None,
) -> Sql:
    """Plan as ``action`` the accounts of ``rows`` (a ``FROM ...`` clause of rows named ``row``), numbered
    in ``order``; ``hashed`` is the SQL of their hash where it is not their ``row_hash`` as it stands."""
    picked = ", ".join(
        hashed if hashed is not None and column == "row_hash" else f"{row}.{column}"
        for column in _ACCOUNT_COLUMNS
    )
    planned = text(f"'{action}', ROW_NUMBER() OVER (ORDER BY {order}), {picked}")
    columns = ("list_id", "run_id", "action", "seq", *_ACCOUNT_COLUMNS)
    return _insert_for_run(state.plan, columns, list_id, run_id, planned, rows)


def insert_additions(state: StateSql, candidates: str, list_id: str, run_id: str, sendable: Sql) -> Sql:
    """Plan the ``sendable`` candidates as additions, numbered in source order."""
    rows = sql("FROM {candidates} s WHERE {sendable}", candidates=text(candidates), sendable=sendable)
    return _insert_plan(state, list_id, run_id, "add", "s.record", rows, row="s")


def insert_staged_additions(state: StateSql, stage: str, list_id: str, run_id: str) -> Sql:
    """Plan as additions every valid staged row, numbered in source order, hashing those SQL staged.

    For a run with no members to leave out, nothing held back and no key twice (a first run, a full
    resync): the candidates would be these very rows, so they are not copied there first.
    """
    rows = sql("FROM {stage} s WHERE s.reason IS NULL", stage=text(stage))
    hashed = staged_hash_sql(state.dialect)
    return _insert_plan(state, list_id, run_id, "add", "s.record", rows, row="s", hashed=hashed)


def insert_removals(state: StateSql, members: Sql, stage: str, list_id: str, run_id: str) -> Sql:
    """Plan as removals the list's ``members`` (the members table, or those staging found left over)
    whose key no staged row has, numbered by key."""
    rows = sql(
        "FROM {members} m WHERE m.list_id = {list_id} AND NOT EXISTS (SELECT 1 FROM {stage} s "
        "WHERE s.account_id = m.account_id AND s.crm_org_id = m.crm_org_id)",
        members=members,
        list_id=list_id,
        stage=text(stage),
    )
    return _insert_plan(state, list_id, run_id, "remove", "m.account_id, m.crm_org_id", rows, row="m")


def planned_counts(state: StateSql, list_id: str, run_id: str) -> Sql:
    """``(action, rows)`` of a run's plan."""
    return state.sql(
        "SELECT action, COUNT(*) FROM {plan} WHERE {run} GROUP BY action", run=of_run(list_id, run_id)
    )


def invalid_rows(stage: str, condition: Sql) -> Sql:
    """``FROM ...`` the staged rows that failed validation and pass ``condition``."""
    return sql(
        "FROM {stage} s WHERE s.reason IS NOT NULL AND {condition}", stage=text(stage), condition=condition
    )


def candidate_rows(candidates: str, condition: Sql) -> Sql:
    """``FROM ...`` the candidates that pass ``condition``."""
    return sql("FROM {candidates} s WHERE {condition}", candidates=text(candidates), condition=condition)


def insert_run(
    state: StateSql,
    list_id: str,
    run_id: str,
    *,
    mode: str,
    status: str,
    counts: Mapping[str, int],
    started_at: datetime,
) -> Sql:
    """The run's row: its mode, its status and the plan's ``counts`` (by column); every other count of
    :data:`~abm_provider.accounts.sync.state.RUN_COUNTS` is 0, nothing being sent yet."""
    check_run_counts(counts)
    return state.sql(
        "INSERT INTO {runs} (list_id, run_id, mode, status, {count_columns}, started_at) "
        "VALUES ({list_id}, {run_id}, {mode}, {status}, {counts}, {started_at})",
        count_columns=text(", ".join(RUN_COUNTS)),
        list_id=list_id,
        run_id=run_id,
        mode=mode,
        status=status,
        counts=join(", ", (sql("{n}", n=counts[c]) if c in counts else text("0") for c in RUN_COUNTS)),
        started_at=started_at,
    )


def held_reason(state: StateSql, list_id: str) -> Sql:
    """The reason a held row ``s`` was refused before."""
    return state.sql(
        "(SELECT MAX(r.reason) FROM {rejects} r WHERE r.list_id = {list_id} AND r.row_hash = s.row_hash)",
        list_id=list_id,
    )


def log_rows(
    state: StateSql, rows: Sql, list_id: str, run_id: str, outcome: str, reason: Sql, logged_at: datetime
) -> Sql:
    """Log each of ``rows`` (a ``FROM ...`` clause of rows ``s``) with ``outcome`` and ``reason``."""
    picked = sql(
        "'none', {outcome}, s.account_id, s.crm_org_id, {reason}, s.record, {logged_at}",
        outcome=outcome,
        reason=reason,
        logged_at=logged_at,
    )
    return _insert_for_run(state.log, LOG_COLUMNS, list_id, run_id, picked, rows)


def insert_rejects(
    state: StateSql, rows: Sql, list_id: str, run_id: str, action: str, recorded_at: datetime
) -> Sql:
    """Record each of ``rows`` (a ``FROM ...`` clause of staged rows ``s``) as a reject of ``action``."""
    picked = sql(
        "{action}, s.account_id, s.crm_org_id, s.row_hash, s.reason, s.record, s.line, s.raw, {recorded_at}",
        action=action,
        recorded_at=recorded_at,
    )
    return _insert_for_run(state.rejects, REJECTS_COLUMNS, list_id, run_id, picked, rows)


def examples(stage: str, sendable: Sql, count: int) -> Sql:
    """``(record, reason)`` of the first ``count`` invalid rows that are ``sendable`` (not held)."""
    return sql(
        "SELECT record, reason {rows} ORDER BY record LIMIT {count}",
        rows=invalid_rows(stage, sendable),
        count=text(str(int(count))),
    )


def sample(state: StateSql, list_id: str, run_id: str, action: str, count: int) -> Sql:
    """``(account_id, crm_org_id)`` of the first ``count`` rows of an action of a run's plan."""
    return state.sql(
        "SELECT account_id, crm_org_id FROM {plan} WHERE {run} AND action = {action} "
        "ORDER BY seq LIMIT {count}",
        run=of_run(list_id, run_id),
        action=action,
        count=text(str(int(count))),
    )
