"""Statements that stage a run's source: the stage's columns, the rules in SQL, and the comparison with the
members (:mod:`~abm_provider.accounts.sync.staging` runs them).

The rules in SQL accept only rows the validator would send unchanged (nothing to trim, no default it
would fill differently), so a row staged here has the values Python would give it, and the same hash
once :func:`staged_hash_sql` has computed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from abm_provider.accounts.sync.state import KEY_LENGTH
from abm_provider.accounts.sync.statements.binding import Sql, join, sql, text, text_value, values

if TYPE_CHECKING:
    from abm_provider.accounts.validation import AccountValidator
    from abm_provider.warehouse.dialects import Dialect

#: The stage's columns: a valid row has ``reason`` and ``raw`` empty, an invalid one has the reason
#: it failed and its values as JSON.
STAGE_COLUMNS = (
    "record",
    "line",
    "account_id",
    "crm_org_id",
    "crm_type",
    "account_name",
    "row_hash",
    "reason",
    "raw",
)
#: The numbered copy of a SQL source: this column's record number, then the source's columns.
RECORD = "abm_record"
#: The difference of a SQL source and the members carries the members' columns under this prefix.
MEMBER = "abm_member_"
#: The members' columns, as the difference carries them.
_MEMBER_COLUMNS = ("list_id", "account_id", "crm_org_id", "crm_type", "account_name", "row_hash")
#: The rules in SQL: an id of printable ASCII without space (nothing to trim, nothing forbidden); a
#: name or org that starts and ends with one and holds no control character (tab, newline and carriage
#: return allowed, as the validator allows them), or is empty. No ``%`` in them: they stand in
#: statements with bound parameters, where a format-style driver reads ``%`` as a marker.
_PLAIN_ID = "[!-~]+"
_PLAIN_TEXT = "([!-~]([^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]*[!-~]){0,1}){0,1}"


def stage_columns_sql(dialect: Dialect) -> str:
    """The stage's columns, its keys compared exactly as the state tables' are, and where a dialect needs
    one, the index the removals look members up by."""
    key, long_text = dialect.text_sql(KEY_LENGTH), dialect.text_sql()
    return (
        f"record BIGINT, line BIGINT, account_id {key}, crm_org_id {key}, crm_type {key}, "
        f"account_name {key}, row_hash {dialect.text_sql(64)}, reason {long_text}, raw {long_text}"
        f"{dialect.key_index_sql(['account_id', 'crm_org_id'])}"
    )


def staged_hash_sql(dialect: Dialect) -> str:
    """SQL for the hash of a valid staged row ``s``: as staged, or where SQL staged it without one,
    computed there: :func:`~abm_provider.accounts.sync.row_values.account_hash` of the same values."""
    if not dialect.has_rules_in_sql:
        return "s.row_hash"  # this database stages in Python, which hashes every row
    parts = ["s.account_id", "COALESCE(s.account_name, '')", "s.crm_org_id", "COALESCE(s.crm_type, '')"]
    return f"COALESCE(s.row_hash, {dialect.md5_sql(parts)})"


def count(relation: Sql, where: Sql | None = None) -> Sql:
    """How many rows ``relation`` (a table, or a query in parentheses) has, of those passing ``where``."""
    found = sql("SELECT COUNT(*) FROM {relation} n", relation=relation)
    return found if where is None else found + sql(" WHERE {where}", where=where)


def source_row() -> Sql:
    """A condition on a row of a numbered source or a difference: it is a source row (not a member)."""
    return text(f"{RECORD} IS NOT NULL")


def plain(dialect: Dialect, validator: AccountValidator, fields: Mapping[str, str], texts: set[str]) -> Sql:
    """A condition on a numbered row: the validator would send its values as they are.

    ``fields`` maps the API fields the source has to their columns as SQL; ``texts`` names those whose
    column is text (a column of another type is plain only when ``NULL``).
    """
    matches, length = dialect.matches_sql, validator.max_field_length
    account_id = fields["id"]
    checks = [
        text(
            f"{account_id} IS NOT NULL AND {matches(account_id, _PLAIN_ID)} "
            f"AND LENGTH({account_id}) <= {length}"
        )
    ]
    for field in ("name", "crmOrgId"):
        if field in fields:
            column = fields[field]
            # A database whose regular expressions cannot say "no control character" (Snowflake's
            # literals turn the escapes into the characters) leaves every such value to Python.
            rule = matches(column, _PLAIN_TEXT)
            plain_text = rule is not None and field in texts
            checks.append(
                text(
                    f"({column} IS NULL OR ({rule} AND LENGTH({column}) <= {length}))"
                    if plain_text
                    else f"{column} IS NULL"
                )
            )
    if "crmType" in fields:
        column = fields["crmType"]
        exact = dialect.exact_sql(column)  # "salesforce" is not a known type
        known = sorted(validator.crm_types)
        listed = (
            sql("{exact} IN ({known})", exact=text(exact), known=values(known)) if known else text("1 = 0")
        )
        if "crmType" in texts:
            checks.append(
                sql(
                    "({column} IS NULL OR {exact} = '' OR {listed})",
                    column=text(column),
                    exact=text(exact),
                    listed=listed,
                )
            )
        else:
            checks.append(text(f"{column} IS NULL"))
    return join(" AND ", checks)


def staged_values(
    dialect: Dialect, validator: AccountValidator, fields: Mapping[str, str], texts: set[str]
) -> list[Sql]:
    """SQL for the id, org, type and name a plain row is staged with, as the validator makes them."""
    nothing = dialect.cast_sql("NULL", "TEXT")

    def given(field: str) -> str:
        return f"NULLIF({fields[field]}, '')" if field in texts else nothing

    def or_default(field: str, default: str | None) -> Sql:
        return sql(
            "COALESCE({given}, {default})", given=text(given(field)), default=text_value(dialect, default)
        )

    org = or_default(
        "crmOrgId", (validator.default_crm_org_id or "") if "crmOrgId" in validator.fields else ""
    )
    crm_type = (
        or_default("crmType", validator.default_crm_type) if "crmType" in validator.fields else text(nothing)
    )
    return [text(fields["id"]), org, crm_type, text(given("name"))]


def insert_plain(dialect: Dialect, stage: str, rows: Sql, staged: Sequence[Sql], plain_rows: Sql) -> Sql:
    """Stage the plain rows of ``rows`` (a numbered source or a difference) with the ``staged`` id, org,
    type and name; no hash: the plan computes it for the few rows that need one."""
    cast = dialect.cast_sql
    nothing = text(cast("NULL", "TEXT"))
    stage_values = join(
        ", ", [text(RECORD), text(cast("NULL", "BIGINT")), *staged, nothing, nothing, nothing]
    )
    return sql(
        "INSERT INTO {stage} ({columns}) SELECT {values} FROM {rows} n WHERE {numbered} AND {plain}",
        stage=text(stage),
        columns=text(", ".join(STAGE_COLUMNS)),
        values=stage_values,
        rows=rows,
        numbered=source_row(),
        plain=plain_rows,
    )


def other_rows(rows: Sql, columns: str, plain_rows: Sql, after: int, page: int) -> Sql:
    """A page of the numbered rows after record ``after`` that the rules in SQL did not prove plain."""
    return page_after(rows, columns, after, page, sql("NOT ({plain})", plain=plain_rows))


def page_after(rows: Sql, columns: str, after: int, page: int, where: Sql | None = None) -> Sql:
    """``page`` numbered rows after record ``after`` (those passing ``where``): their record, then
    ``columns``."""
    condition = sql("{record} > {after}", record=text(RECORD), after=after)
    if where is not None:
        condition += sql(" AND {where}", where=where)
    return sql(
        "SELECT {record}, {columns} FROM {rows} n WHERE {condition} ORDER BY {record} LIMIT {page}",
        record=text(RECORD),
        columns=text(columns),
        rows=rows,
        condition=condition,
        page=text(str(int(page))),
    )


def _member_columns() -> str:
    return ", ".join(f"m.{c} AS {MEMBER}{c}" for c in _MEMBER_COLUMNS)


def difference_shape(rows: Sql, members: Sql) -> Sql:
    """No rows, with the columns of the difference: a numbered row's, then a member's (prefixed)."""
    return sql(
        "SELECT n.*, {members_columns} FROM {rows} n, {members} m WHERE 1 = 0",
        members_columns=text(_member_columns()),
        rows=rows,
        members=members,
    )


def insert_difference(diff: str, rows: Sql, members: Sql, list_id: str, staged: Sequence[Sql]) -> Sql:
    """Fill ``diff`` with the numbered rows no member of ``list_id`` equals and the members no row equals.

    One full outer join on :func:`equal_to_member`.
    """
    return sql(
        "INSERT INTO {diff} SELECT n.*, {members_columns} FROM {rows} n FULL OUTER JOIN "
        "(SELECT * FROM {members} WHERE list_id = {list_id}) m ON {equal} "
        "WHERE n.{record} IS NULL OR m.account_id IS NULL",
        diff=text(diff),
        members_columns=text(_member_columns()),
        rows=rows,
        members=members,
        list_id=list_id,
        equal=equal_to_member(staged),
        record=text(RECORD),
    )


def equal_to_member(staged: Sequence[Sql]) -> Sql:
    """A condition on a numbered row and a member ``m``: the row's ``staged`` values (id, org, type,
    name, as the SQL rules would stage them) are the member's recorded ones. The keys compare bare (an
    id is never ``NULL`` on a member, an org never on either side), so a join hashes them as they are; a
    type or a name may be ``NULL`` on both sides."""
    account_id, org, crm_type, name = staged
    return sql(
        "{account_id} = m.account_id AND {org} = m.crm_org_id "
        "AND COALESCE({crm_type}, '') = COALESCE(m.crm_type, '') "
        "AND COALESCE({name}, '') = COALESCE(m.account_name, '')",
        account_id=account_id,
        org=org,
        crm_type=crm_type,
        name=name,
    )


def members_left(diff: str) -> Sql:
    """The members of the difference ``diff`` that no source row equals, as a relation of member rows."""
    columns = ", ".join(f"{MEMBER}{c} AS {c}" for c in _MEMBER_COLUMNS)
    return text(f"(SELECT {columns} FROM {diff} WHERE {RECORD} IS NULL)")
