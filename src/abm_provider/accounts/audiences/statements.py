"""Statements of the audience sync's tiering (:mod:`~abm_provider.accounts.audiences.tiering` runs them):
the excluded accounts, the comparison with the programme's members, and the source's rows each given
its list. The moves table's are in :mod:`~abm_provider.accounts.audiences.move_statements`.

``n`` is a numbered source row throughout, ``t`` a row of the tiered table.
Every value is bound; only names the dialect quoted and numbers the sync made are written into the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.accounts.sync.state import KEY_LENGTH
from abm_provider.accounts.sync.statements.binding import Sql, join, sql, text, text_value, values
from abm_provider.accounts.sync.statements.staging import RECORD, equal_to_member

if TYPE_CHECKING:
    from abm_provider.accounts.sync.statements.tables import StateSql
    from abm_provider.warehouse.dialects import Dialect

#: The columns the tiered table adds to the source's: the row's list (its audience's place in the
#: priority order, from 1; ``NULL`` for an audience the programme does not map), its account's key as
#: the lists record it, and whether it is excluded.
LIST, ACCOUNT, ORG, EXCLUDED = "abm_list", "abm_account", "abm_org", "abm_excluded"
#: The outranked table's column: the best place of an account whose rows name several.
BEST = "abm_best"
#: The changed table's columns besides the account's key: the key as a source row of the account spells
#: it (:meth:`RowKeys.account` ``as_written``), which the source's rows are joined on.
ROW_ACCOUNT, ROW_ORG = "abm_row_account", "abm_row_org"
#: Names a source column may not have: the tiered table's own.
RESERVED = (RECORD, LIST, ACCOUNT, ORG, EXCLUDED)


def excluded_columns(dialect: Dialect) -> str:
    """The columns of the work table of excluded account ids."""
    return f"account_id {dialect.text_sql(KEY_LENGTH)}"


def trimmed(dialect: Dialect, column: str) -> str:
    """A source column's value as text without the whitespace around it, as the validator reads an id
    or an org (``str.strip()``): an id with a tab after it is the account without, not another."""
    return dialect.strip_sql(dialect.cast_sql(column, "TEXT"))


def insert_excluded(dialect: Dialect, excluded: str, rows: Sql, column: str) -> Sql:
    """Add the ids in ``column`` of ``rows`` (a table, or a query in parentheses) to the excluded ones;
    an id longer than any account's (:data:`KEY_LENGTH`) excludes none, and is left out."""
    value = trimmed(dialect, f"n.{dialect.quote(column)}")
    return sql(
        "INSERT INTO {excluded} (account_id) SELECT DISTINCT {value} FROM {rows} n "
        "WHERE {value} IS NOT NULL AND {value} <> '' AND {length} <= {most}",
        excluded=text(excluded),
        value=text(value),
        rows=rows,
        length=text(dialect.char_length_sql(value)),
        most=text(str(KEY_LENGTH)),
    )


def insert_excluded_members(state: StateSql, excluded: str, list_ids: Sequence[str]) -> Sql:
    """Add the accounts recorded on ``list_ids`` (lists another sync keeps) to the excluded ones."""
    return state.sql(
        "INSERT INTO {excluded} (account_id) SELECT DISTINCT m.account_id FROM {members} m "
        "WHERE m.list_id IN ({lists})",
        excluded=text(excluded),
        lists=values(list(list_ids)),
    )


@dataclass(frozen=True)
class RowKeys:
    """How a source row is tiered: its audience's column, the audience values in priority order, and
    the columns of its account's key (the id; the org, or ``default_org``, or ``''``)."""

    audience: str
    values_in_order: Sequence[str]
    id_column: str
    org_column: str | None
    default_org: str | None

    def place(self, dialect: Dialect, row: str) -> Sql:
        """The audience's place in the priority order (from 1) of source row ``row``; ``NULL`` for an
        audience the programme does not map. Audiences compare as text, so a number matches ``"1"``,
        and exactly, so ``TIER_1`` is not ``tier_1`` on MySQL either, whose collations fold case."""
        whens = join(
            " ",
            (
                sql("WHEN {value} THEN {place}", value=text_value(dialect, value), place=text(str(i)))
                for i, value in enumerate(self.values_in_order, start=1)
            ),
        )
        audience = dialect.exact_sql(dialect.cast_sql(f"{row}.{dialect.quote(self.audience)}", "TEXT"))
        return sql("CASE {audience} {whens} END", audience=text(audience), whens=whens)

    def account(self, dialect: Dialect, row: str, *, as_written: bool = False) -> Sql:
        """The id of source row ``row`` as the lists record it (``''`` for none); ``as_written``, as
        text without the whitespace around it stripped (the same for an id that has none)."""
        return text(f"COALESCE({self._text(dialect, row, self.id_column, as_written)}, '')")

    def org(self, dialect: Dialect, row: str, *, as_written: bool = False) -> Sql:
        """The org of source row ``row`` as the lists record it; ``as_written``, as :meth:`account`."""
        if self.org_column is not None:
            found = text(f"NULLIF({self._text(dialect, row, self.org_column, as_written)}, '')")
            default = text_value(dialect, self.default_org)
            return sql("COALESCE({found}, {default}, '')", found=found, default=default)
        if self.default_org is not None:
            return text_value(dialect, self.default_org)
        return text("''")

    @staticmethod
    def _text(dialect: Dialect, row: str, column: str, as_written: bool) -> str:
        """A key column of source row ``row`` as text, stripped unless ``as_written``."""
        name = f"{row}.{dialect.quote(column)}"
        return dialect.cast_sql(name, "TEXT") if as_written else trimmed(dialect, name)


def tiered(dialect: Dialect, numbered: Sql, excluded: str, keys: RowKeys, changed: str | None = None) -> Sql:
    """The ``SELECT`` of the tiered table: every numbered source row, with :data:`RESERVED`'s columns;
    with ``changed``, the rows of the accounts in that table only (its keys are distinct).

    The excluded ids and the changed keys are looked up with ``IN`` and a join rather than a correlated
    ``EXISTS`` on the row's key: DuckDB evaluates an ``EXISTS`` on a key worked out from the row's
    columns row by row, where it hashes an ``IN`` or a join once. The changed keys are joined as the
    rows spell them (:data:`ROW_ACCOUNT`), so the key is stripped only in the rows joined, not in
    every row of the source.
    """
    account, org = keys.account(dialect, "n"), keys.org(dialect, "n")
    rows = numbered
    if changed is not None:
        rows = sql(
            "{numbered} n JOIN {changed} c ON c.{row_account} = {account} AND c.{row_org} = {org}",
            numbered=numbered,
            changed=text(changed),
            row_account=text(ROW_ACCOUNT),
            account=keys.account(dialect, "n", as_written=True),
            row_org=text(ROW_ORG),
            org=keys.org(dialect, "n", as_written=True),
        )
    else:
        rows += text(" n")
    return sql(
        "SELECT n.*, {place} AS {list}, {account} AS {account_name}, {org} AS {org_name}, "
        "CASE WHEN {account} IN (SELECT x.account_id FROM {excluded} x) THEN 1 ELSE 0 END AS {excluded_name} "
        "FROM {rows}",
        place=keys.place(dialect, "n"),
        list=text(LIST),
        account=account,
        account_name=text(ACCOUNT),
        org=org,
        org_name=text(ORG),
        excluded=text(excluded),
        excluded_name=text(EXCLUDED),
        rows=rows,
    )


def changed_columns(dialect: Dialect) -> str:
    """The columns of the changed table: the key of an account whose rows or memberships changed, and
    each way its rows spell it (the key itself for most). Unbounded: a row whose id no list could hold
    pairs with no member and is tiered again, to be refused as it was on the first run. (Only the
    databases with full outer joins build it, none of which keys a table by an index.)"""
    key = dialect.text_sql()
    return f"{ACCOUNT} {key}, {ORG} {key}, {ROW_ACCOUNT} {key}, {ROW_ORG} {key}"


def insert_changed(
    state: StateSql,
    changed: str,
    rows: Sql,
    excluded: str,
    keys: RowKeys,
    list_ids: Sequence[str],
    staged: Sequence[Sql],
) -> Sql:
    """Fill ``changed`` with the accounts a run must tier again: one full outer join of the source's
    ``rows`` (a table, or a query in parentheses) with the members of the programme's lists.

    A row and a member pair when the row's ``staged`` values (its id, org, type and name as the SQL
    rules stage them, on ``t``) have the member's key, and are in step when the row names the member's
    list, has its recorded type and name too, and the account is not ``excluded``. An account with a
    pair not in step, a row and no member, or a member and no row, is changed; any other account keeps
    its one list, every row of it naming that list. The rows join on their values as they are, so the
    join hashes the source's own columns; a row whose id or org the lists record otherwise (spaces
    around it) pairs with no member, and its account is tiered again, as an excluded account with rows
    is. Each changed account is written with the key its unpaired rows spell (:data:`ROW_ACCOUNT`),
    the key itself for the others; :func:`insert_changed_keys` adds the key for a row spelled without
    the whitespace.
    """
    dialect = state.dialect
    account_id, org = staged[0], staged[1]
    return state.sql(
        "INSERT INTO {changed} ({account_name}, {org_name}, {row_account}, {row_org}) SELECT DISTINCT "
        "CASE WHEN m.account_id IS NULL THEN {account} ELSE m.account_id END, "
        "CASE WHEN m.account_id IS NULL THEN {org} ELSE m.crm_org_id END, "
        "CASE WHEN m.account_id IS NULL THEN {account_as_written} ELSE m.account_id END, "
        "CASE WHEN m.account_id IS NULL THEN {org_as_written} ELSE m.crm_org_id END "
        "FROM (SELECT n.*, {place} AS {list} FROM {rows} n) t FULL OUTER JOIN (SELECT m.account_id, "
        "m.crm_org_id, m.crm_type, m.account_name, {member_place} AS abm_place, CASE WHEN m.account_id IN "
        "(SELECT x.account_id FROM {excluded} x) THEN 1 ELSE 0 END AS {excluded_name} FROM {members} m "
        "WHERE m.list_id IN ({lists})) m ON {account_id} = m.account_id AND {staged_org} = m.crm_org_id "
        "WHERE CASE WHEN t.{list} = m.abm_place AND m.{excluded_name} = 0 AND {same} THEN 0 ELSE 1 END = 1",
        changed=text(changed),
        account_name=text(ACCOUNT),
        org_name=text(ORG),
        row_account=text(ROW_ACCOUNT),
        row_org=text(ROW_ORG),
        account=keys.account(dialect, "t"),
        org=keys.org(dialect, "t"),
        account_as_written=keys.account(dialect, "t", as_written=True),
        org_as_written=keys.org(dialect, "t", as_written=True),
        place=keys.place(dialect, "n"),
        list=text(LIST),
        rows=rows,
        member_place=by_place(dialect, "m.list_id", list_ids, to_list=False),
        excluded=text(excluded),
        excluded_name=text(EXCLUDED),
        lists=values(list(list_ids)),
        account_id=account_id,
        staged_org=org,
        same=equal_to_member(staged),
    )


def insert_changed_keys(changed: str) -> Sql:
    """Add to ``changed`` each account's key as a spelling of it, where only a spelling with whitespace
    around it is there: the account's rows spelled without any (members, in step, or not in the source)
    are tiered again with it.

    A member's key is stripped (the validator stripped it before it was sent), so a source row that
    pairs with one spells the key as the lists record it: only a row that pairs with none is written
    with another spelling, and its account needs both.
    """
    return text(
        f"INSERT INTO {changed} ({ACCOUNT}, {ORG}, {ROW_ACCOUNT}, {ROW_ORG}) SELECT DISTINCT c.{ACCOUNT}, "
        f"c.{ORG}, c.{ACCOUNT}, c.{ORG} FROM {changed} c WHERE (c.{ROW_ACCOUNT} <> c.{ACCOUNT} OR "
        f"c.{ROW_ORG} <> c.{ORG}) AND NOT EXISTS (SELECT 1 FROM {changed} s WHERE s.{ROW_ACCOUNT} = "
        f"c.{ACCOUNT} AND s.{ROW_ORG} = c.{ORG})"
    )


def changed_accounts(changed: str) -> Sql:
    """How many accounts ``changed`` holds (an account spelled two ways has two rows)."""
    return text(f"SELECT COUNT(*) FROM (SELECT DISTINCT {ACCOUNT}, {ORG} FROM {changed}) c")


def changed_members(state: StateSql, changed: str, list_ids: Sequence[str]) -> Sql:
    """The members of the programme's lists whose accounts are in ``changed``."""
    return state.sql(
        "SELECT m.* FROM {members} m WHERE m.list_id IN ({lists}) AND EXISTS (SELECT 1 FROM {changed} c "
        "WHERE c.{account} = m.account_id AND c.{org} = m.crm_org_id)",
        lists=values(list(list_ids)),
        changed=text(changed),
        account=text(ACCOUNT),
        org=text(ORG),
    )


def changed_member_counts(changed_members_table: str) -> Sql:
    """``(list_id, accounts)``: the members in ``changed_members_table`` of each list, the accounts it
    plans again; the list's other members are in step, every row of them naming that list, unchanged."""
    return text(f"SELECT list_id, COUNT(*) FROM {changed_members_table} GROUP BY list_id")


def outranked_columns(dialect: Dialect) -> str:
    """The columns of the outranked table: the key of an account with two rows or more, and the best
    place its rows name."""
    key = dialect.text_sql(KEY_LENGTH)
    return f"{ACCOUNT} {key}, {ORG} {key}, {BEST} INTEGER{dialect.key_index_sql([ACCOUNT, ORG])}"


def insert_outranked(dialect: Dialect, tiered_table: str, outranked: str) -> Sql:
    """Fill the outranked table: the accounts that more than one mapped row names, each with the best
    place its rows name. Few accounts have two rows, so every other row is its account's best without
    a look at the others (a window over every row would sort them all); and with the table empty, no
    list's rows repeat a key (:func:`any_outranked`), which each list's plan would otherwise group
    its rows again to ask. A key longer than any list holds (:data:`KEY_LENGTH`) is left out: each
    of its rows is refused in its own list's plan."""
    length = dialect.char_length_sql
    return text(
        f"INSERT INTO {outranked} ({ACCOUNT}, {ORG}, {BEST}) SELECT {ACCOUNT}, {ORG}, MIN({LIST}) "
        f"FROM {tiered_table} WHERE {LIST} IS NOT NULL AND {ACCOUNT} <> '' "
        f"AND {length(ACCOUNT)} <= {KEY_LENGTH} AND {length(ORG)} <= {KEY_LENGTH} "
        f"GROUP BY {ACCOUNT}, {ORG} HAVING COUNT(*) > 1"
    )


def any_outranked(outranked: str) -> Sql:
    """One row when some account has two mapped rows, else none."""
    return text(f"SELECT 1 FROM {outranked} LIMIT 1")


def outranked_join(outranked: str) -> str:
    """``LEFT JOIN`` of a tiered row ``t`` with its account's best place ``o.abm_best`` (``NULL``: its
    account names one audience)."""
    return f"LEFT JOIN {outranked} o ON o.{ACCOUNT} = t.{ACCOUNT} AND o.{ORG} = t.{ORG}"


#: A tiered row ``t`` (joined by :func:`outranked_join`) names its account's best audience.
IS_BEST = f"(o.{BEST} IS NULL OR o.{BEST} >= t.{LIST})"


def assigned(tiered_table: str, outranked: str, place: int, columns: str) -> str:
    """The ``SELECT`` of the rows the list at ``place`` keeps: its audience's, of accounts no higher
    audience names and none excluded (a row with no id stays, to be refused as the list sync refuses
    it). Their record number first, then ``columns``. Text only (no value to bind), so the stager can
    read it in place as it reads a table."""
    return (
        f"SELECT {RECORD}, {columns} FROM {tiered_table} t WHERE t.{LIST} = {int(place)} "
        f"AND t.{EXCLUDED} = 0 AND NOT EXISTS (SELECT 1 FROM {outranked} o WHERE o.{ACCOUNT} = t.{ACCOUNT} "
        f"AND o.{ORG} = t.{ORG} AND o.{BEST} < t.{LIST})"
    )


def tier_counts(tiered_table: str, outranked: str) -> Sql:
    """``(place, rows, kept, outranked, excluded)`` per place in the tiered table (``NULL``: unmapped)."""
    return text(
        f"SELECT t.{LIST}, COUNT(*), "
        f"SUM(CASE WHEN t.{EXCLUDED} = 0 AND {IS_BEST} THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN o.{BEST} < t.{LIST} THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN t.{EXCLUDED} = 1 AND {IS_BEST} THEN 1 ELSE 0 END) "
        f"FROM {tiered_table} t {outranked_join(outranked)} GROUP BY t.{LIST}"
    )


def unmapped_sample(dialect: Dialect, tiered_table: str, audience: str, count: int) -> Sql:
    """Up to ``count`` audience values of rows the programme does not map."""
    value = dialect.cast_sql(dialect.quote(audience), "TEXT")
    return text(
        f"SELECT DISTINCT {value} FROM {tiered_table} WHERE {LIST} IS NULL ORDER BY 1 LIMIT {int(count)}"
    )


def by_place(dialect: Dialect, column: str, list_ids: Sequence[str], *, to_list: bool) -> Sql:
    """``CASE`` mapping ``column`` from a list's place to its id (``to_list``) or from its id to its place."""
    pairs = (
        sql("WHEN {place} THEN {list_id}", place=text(str(i)), list_id=text_value(dialect, list_id))
        if to_list
        else sql("WHEN {list_id} THEN {place}", place=text(str(i)), list_id=text_value(dialect, list_id))
        for i, list_id in enumerate(list_ids, start=1)
    )
    return sql("CASE {column} {pairs} END", column=text(column), pairs=join(" ", pairs))
