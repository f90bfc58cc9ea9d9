"""Statements of the audience sync's moves table (:mod:`~abm_provider.accounts.audiences.moves` runs them):
the run's removals, each account it moved between lists, removed as excluded or kept off, and what
the table counts.

``r`` is a row of the run's removals, ``t`` a row of the tiered table
(:mod:`~abm_provider.accounts.audiences.statements`), ``p`` a plan row. Every value is bound; only names
the dialect quoted and numbers the sync made are written into the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from abm_provider.accounts.audiences.statements import (
    ACCOUNT,
    EXCLUDED,
    IS_BEST,
    LIST,
    ORG,
    by_place,
    outranked_join,
)
from abm_provider.accounts.sync.state import BLOCKED, DRY_RUN, KEY_LENGTH
from abm_provider.accounts.sync.statements.binding import Sql, sql, text, text_value, values
from abm_provider.accounts.sync.statements.runs import plan_range

if TYPE_CHECKING:
    from datetime import datetime

    from abm_provider.accounts.sync.statements.tables import StateSql
    from abm_provider.warehouse.dialects import Dialect

#: What the moves table says happened to an account: it left one list of the programme for another,
#: it was removed from a list because it is excluded, or it was kept off the list its rows name; or its
#: move waits, the service having refused its removal from the list it was to leave.
MOVED, EXCLUDED_FROM, KEPT_OFF, WAITING = "moved", "excluded", "kept_off", "waiting"
#: A move whose addition the service refused: the account left its old list and is on none.
REFUSED = "refused"
#: The moves table's columns, in the order its rows are written.
_MOVE_COLUMNS = text("run_id, kind, account_id, crm_org_id, from_list, to_list, logged_at")


def create_moves(dialect: Dialect, table: str) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the moves table: one row per account a run moved, removed as
    excluded, or kept off."""
    key, at = f"{dialect.text_sql(KEY_LENGTH)} NOT NULL", dialect.type_sql("TIMESTAMP")
    name = dialect.text_sql(KEY_LENGTH)
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (run_id {key}, kind {dialect.text_sql(8)} NOT NULL, "
        f"account_id {key}, crm_org_id {key}, from_list {name}, to_list {name}, "
        f"logged_at {at} NOT NULL{dialect.key_index_sql(['run_id'])})"
    )


def _on_programme(list_ids: Sequence[str]) -> Sql:
    """A move row's condition: from or to one of the programme's lists (its table is shared)."""
    lists = values(list(list_ids))
    return sql("(from_list IN ({lists}) OR to_list IN ({lists}))", lists=lists)


def delete_moves(moves: str, run_id: str, list_ids: Sequence[str]) -> Sql:
    """Forget what an earlier plan of this run said of the programme's lists (a dry or stopped run)."""
    return sql(
        "DELETE FROM {moves} WHERE run_id = {run_id} AND {on_programme}",
        moves=text(moves),
        run_id=run_id,
        on_programme=_on_programme(list_ids),
    )


def delete_kept_moves(state: StateSql, moves: str, run_id: str, list_ids: Sequence[str]) -> Sql:
    """Forget the moves of the programme's previews and stopped runs but this one, as the planner
    forgets their plans: kept to be read until the next run plans, never counted as moves made."""
    lists = values(list(list_ids))
    return state.sql(
        "DELETE FROM {moves} WHERE run_id <> {run_id} AND {on_programme} "
        "AND run_id IN (SELECT r.run_id FROM {runs} r WHERE r.list_id IN ({lists}) AND r.status IN ({kept}))",
        moves=text(moves),
        run_id=run_id,
        lists=lists,
        on_programme=_on_programme(list_ids),
        kept=values([BLOCKED, DRY_RUN]),
    )


def removed_columns(dialect: Dialect) -> str:
    """The columns of the work tables of the run's removals and of the additions of the accounts it
    removes: the list, its place, the account's key."""
    key = dialect.text_sql(KEY_LENGTH)
    return f"list_id {key}, place INTEGER, account_id {key}, crm_org_id {key}"


def insert_removed(state: StateSql, removed: str, run_id: str, list_ids: Sequence[str]) -> Sql:
    """Copy the run's planned removals on the programme's lists into ``removed``, a work table small
    enough (and new enough) for the statements below to join it by hashing: the plan table's
    statistics describe an earlier run's plan."""
    return _insert_planned(state, removed, run_id, list_ids, "remove")


def insert_added(state: StateSql, added: str, run_id: str, list_ids: Sequence[str]) -> Sql:
    """Copy the run's planned additions on the programme's lists into ``added``: a move is a key removed
    from one list and added to another. Copied whole, as the removals are: joined to the plan table,
    whose statistics describe an earlier run's plan, the database may pair them row by row."""
    return _insert_planned(state, added, run_id, list_ids, "add")


def _insert_planned(
    state: StateSql, table: str, run_id: str, list_ids: Sequence[str], action: Literal["add", "remove"]
) -> Sql:
    """Copy the run's planned ``action`` rows on the programme's lists into the work table ``table``,
    each with its list's place."""
    return state.sql(
        "INSERT INTO {table} (list_id, place, account_id, crm_org_id) "
        "SELECT p.list_id, {place}, p.account_id, p.crm_org_id FROM {plan} p "
        "WHERE p.list_id IN ({lists}) AND p.run_id = {run_id} AND p.action = {action}",
        table=text(table),
        place=by_place(state.dialect, "p.list_id", list_ids, to_list=False),
        lists=values(list(list_ids)),
        run_id=run_id,
        action=text(f"'{action}'"),
    )


def _log_best_rows(
    dialect: Dialect,
    moves: str,
    kind: str,
    run_id: str,
    list_ids: Sequence[str],
    at: datetime,
    *,
    account: str,
    from_list: str,
    rows: str,
    outranked: str,
    where: str,
) -> Sql:
    """Log ``kind`` for each account of ``rows`` (which hold a tiered row ``t``) whose row names its
    best audience and passes ``where``: ``account`` (its id and org), ``from_list``, and the list that
    audience names."""
    return sql(
        "INSERT INTO {moves} ({columns}) SELECT DISTINCT {run_id}, {kind}, {account}, {from_list}, "
        "{to_list}, {at} FROM {rows} {outranked} WHERE {is_best} AND {where}",
        moves=text(moves),
        columns=_MOVE_COLUMNS,
        run_id=text_value(dialect, run_id),
        kind=text_value(dialect, kind),
        account=text(account),
        from_list=text(from_list),
        to_list=by_place(dialect, f"t.{LIST}", list_ids, to_list=True),
        at=at,
        rows=text(rows),
        outranked=text(outranked_join(outranked)),
        is_best=text(IS_BEST),
        where=text(where),
    )


def insert_moved(
    dialect: Dialect,
    moves: str,
    removed: str,
    added: str,
    tiered_table: str,
    outranked: str,
    run_id: str,
    list_ids: Sequence[str],
    at: datetime,
) -> Sql:
    """Log each account the run removes from one list of the programme and adds to the list its best
    audience names (one already on that list, or whose row there is held back, is only removed)."""
    return _log_best_rows(
        dialect,
        moves,
        MOVED,
        run_id,
        list_ids,
        at,
        account="r.account_id, r.crm_org_id",
        from_list="r.list_id",
        rows=f"{removed} r JOIN {tiered_table} t ON t.{ACCOUNT} = r.account_id AND t.{ORG} = r.crm_org_id",
        outranked=outranked,
        where=f"t.{EXCLUDED} = 0 AND t.{LIST} <> r.place AND EXISTS (SELECT 1 FROM {added} a "
        f"WHERE a.place = t.{LIST} AND a.account_id = r.account_id AND a.crm_org_id = r.crm_org_id)",
    )


def insert_excluded_from(
    dialect: Dialect, moves: str, removed: str, excluded: str, run_id: str, at: datetime
) -> Sql:
    """Log each account the run removes from a list of the programme because it is excluded."""
    return sql(
        "INSERT INTO {moves} ({columns}) "
        "SELECT {run_id}, {change}, r.account_id, r.crm_org_id, r.list_id, NULL, {at} FROM {removed} r "
        "WHERE EXISTS (SELECT 1 FROM {excluded} x WHERE x.account_id = r.account_id)",
        moves=text(moves),
        columns=_MOVE_COLUMNS,
        run_id=text_value(dialect, run_id),
        change=text_value(dialect, EXCLUDED_FROM),
        at=at,
        removed=text(removed),
        excluded=text(excluded),
    )


def insert_kept_off(
    dialect: Dialect,
    moves: str,
    removed: str,
    tiered_table: str,
    outranked: str,
    run_id: str,
    list_ids: Sequence[str],
    at: datetime,
) -> Sql:
    """Log each excluded account of the source with the list its best audience names, unless the run
    removes it (a member is logged as removed, :func:`insert_excluded_from`). A row naming no audience
    of the programme keeps its account off no list: it is not logged (a row with neither list would
    belong to no programme, and no trim would reach it)."""
    return _log_best_rows(
        dialect,
        moves,
        KEPT_OFF,
        run_id,
        list_ids,
        at,
        account=f"t.{ACCOUNT}, t.{ORG}",
        from_list="NULL",
        rows=f"{tiered_table} t",
        outranked=outranked,
        where=f"t.{EXCLUDED} = 1 AND t.{LIST} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {removed} r "
        f"WHERE r.account_id = t.{ACCOUNT} AND r.crm_org_id = t.{ORG})",
    )


def refused_in_run(state: StateSql, run_id: str, list_ids: Sequence[str]) -> Sql:
    """How many accounts the run's rows on the programme's lists count as refused (by our checks or by
    the service): none, and no removal of the run was refused, so no move waits."""
    return state.sql(
        "SELECT COALESCE(SUM(rejected), 0) FROM {runs} WHERE run_id = {run_id} AND list_id IN ({lists})",
        run_id=run_id,
        lists=values(list(list_ids)),
    )


def mark_waiting(state: StateSql, moves: str, run_id: str, to_list: str) -> Sql:
    """Mark the run's moves onto ``to_list`` that must wait: the account is still recorded on the list
    it was to leave (the service refused its removal), and its addition is not sent yet (its plan row
    is still there). Its addition is then held back (:func:`waiting_rows`), so the account is never on
    both lists; the next run plans the move again."""
    still_there = state.sql(
        "EXISTS (SELECT 1 FROM {members} m WHERE m.list_id = w.from_list "
        "AND m.account_id = w.account_id AND m.crm_org_id = w.crm_org_id) "
        "AND EXISTS (SELECT 1 FROM {plan} p WHERE p.list_id = {to_list} AND p.run_id = {run_id} "
        "AND p.action = 'add' AND p.account_id = w.account_id AND p.crm_org_id = w.crm_org_id)",
        to_list=to_list,
        run_id=run_id,
    )
    return _mark_moved(moves, run_id, to_list, WAITING, still_there)


def mark_refused(state: StateSql, moves: str, run_id: str, to_list: str) -> Sql:
    """Once every addition of the run onto ``to_list`` is sent: mark its moves there whose account is
    not recorded on ``to_list`` (the service refused the addition, or did not find the account) as
    refused, so the run does not count them as made. A move that waits is not one of them."""
    not_there = state.sql(
        "NOT EXISTS (SELECT 1 FROM {members} m WHERE m.list_id = w.to_list "
        "AND m.account_id = w.account_id AND m.crm_org_id = w.crm_org_id)"
    )
    return _mark_moved(moves, run_id, to_list, REFUSED, not_there)


def _mark_moved(moves: str, run_id: str, to_list: str, kind: str, condition: Sql) -> Sql:
    """Give the run's moves onto ``to_list`` (rows ``w``) that pass ``condition`` the ``kind`` of a
    move not made."""
    return sql(
        "UPDATE {moves} AS w SET kind = {kind} WHERE w.run_id = {run_id} AND w.kind = {moved} "
        "AND w.to_list = {to_list} AND {condition}",
        moves=text(moves),
        kind=kind,
        run_id=run_id,
        moved=MOVED,
        to_list=to_list,
        condition=condition,
    )


def count_waiting(moves: str, run_id: str, to_list: str) -> Sql:
    """How many of the run's moves onto ``to_list`` wait."""
    return sql(
        "SELECT COUNT(*) FROM {moves} WHERE run_id = {run_id} AND kind = {waiting} AND to_list = {to_list}",
        moves=text(moves),
        run_id=run_id,
        waiting=WAITING,
        to_list=to_list,
    )


def waiting_rows(state: StateSql, moves: str, run_id: str, to_list: str, first: int, last: int) -> Sql:
    """``(seq, from_list)`` of the run's plan additions ``first`` to ``last`` on ``to_list`` whose move
    waits, with the list the account is still on."""
    return state.sql(
        "SELECT p.seq, w.from_list FROM {plan} p JOIN {moves} w ON w.run_id = p.run_id "
        "AND w.to_list = p.list_id AND w.account_id = p.account_id AND w.crm_org_id = p.crm_org_id "
        "WHERE {rows} AND w.kind = {waiting}",
        moves=text(moves),
        rows=plan_range(to_list, run_id, "add", first, last, row="p."),
        waiting=WAITING,
    )


def move_counts(moves: str, run_id: str, list_ids: Sequence[str]) -> Sql:
    """``(kind, from_list, to_list, accounts)`` of the run's moves on the programme's lists."""
    return sql(
        "SELECT kind, from_list, to_list, COUNT(*) FROM {moves} WHERE run_id = {run_id} "
        "AND {on_programme} GROUP BY kind, from_list, to_list",
        moves=text(moves),
        run_id=run_id,
        on_programme=_on_programme(list_ids),
    )


def move_sample(moves: str, run_id: str, from_list: str, to_list: str, count: int) -> Sql:
    """Up to ``count`` accounts the run moved from ``from_list`` to ``to_list``."""
    return sql(
        "SELECT account_id, crm_org_id FROM {moves} WHERE run_id = {run_id} AND kind = {moved} "
        "AND from_list = {from_list} AND to_list = {to_list} ORDER BY account_id LIMIT {count}",
        moves=text(moves),
        run_id=run_id,
        moved=MOVED,
        from_list=from_list,
        to_list=to_list,
        count=text(str(int(count))),
    )


def forget_moves(moves: str, before: datetime, list_ids: Sequence[str]) -> Sql:
    """Drop the moves on the programme's lists logged before ``before`` (the run log's retention,
    which is each programme's own: another's moves stay)."""
    return sql(
        "DELETE FROM {moves} WHERE logged_at < {before} AND {on_programme}",
        moves=text(moves),
        before=before,
        on_programme=_on_programme(list_ids),
    )
