"""A sync run's source, staged in the warehouse: one row per source row, validated and hashed.

Two ways fill the same temporary table (:data:`STAGE_COLUMNS`):

- **In the warehouse**, when the source is a table or query on the state connection itself and the
  database has the rules in SQL (:attr:`~abm_provider.warehouse.dialects.base.Dialect.has_rules_in_sql`).
  The source is numbered (into a temporary table, or inside the comparison below for a table). When
  the list has members, one full outer join first keeps only the rows no member equals and the
  members no row equals (:meth:`Stager._differ`): a list in step with its source stages only what
  changed. The rows the rules in SQL prove valid are staged by one ``INSERT ... SELECT`` (their hash
  left for the plan to compute in SQL, for the rows it keeps), and only the others come back to
  Python, page by page, for the validator to give each its exact reason or its cleaned values. The
  SQL rules accept only rows the validator would send unchanged (nothing to trim, no default it would
  fill differently), so both ways stage the same values for any row, and the same hash once
  :func:`staged_hash_sql` has computed it.
- **In Python** for every other source: each row is validated and hashed here, and written in bulk.

Either way memory stays flat whatever the source's size.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sources import SqlSource, WarehouseQuery
from abm_provider.accounts.sync.row_values import staged_row
from abm_provider.accounts.validation import SourceRow
from abm_provider.common.sql import one_statement

if TYPE_CHECKING:
    from abm_provider.accounts.sources import AccountSource
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.validation import AccountValidator
    from abm_provider.warehouse.dialects import Dialect

#: The temporary table's columns: a valid row has ``reason`` and ``raw`` empty, an invalid one has
#: the reason it failed and its values as JSON.
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
#: The rules in SQL: an id of printable ASCII without space (nothing to trim, nothing forbidden); a
#: name or org that starts and ends with one and holds no control character (tab, newline and carriage
#: return allowed, as the validator allows them), or is empty. No ``%`` in them: they stand in
#: statements with bound parameters, where a format-style driver reads ``%`` as a marker.
_PLAIN_ID = "[!-~]+"
_PLAIN_TEXT = "([!-~]([^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f]*[!-~]){0,1}){0,1}"
#: The numbered copy of a SQL source: this column's record number, then the source's columns.
_RECORD = "abm_record"
#: The difference of a SQL source and the members carries the members' columns under this prefix.
_MEMBER = "abm_member_"
#: The members' columns, as the difference carries them.
_MEMBER_COLUMNS = ("list_id", "account_id", "crm_org_id", "crm_type", "account_name", "row_hash")


@dataclass(frozen=True)
class Staged:
    """What staging a source left for the plan.

    ``members_left``: where the source was compared with the list's members in the warehouse, a
    relation of the members no source row equals (the only ones the run may remove); ``None`` when
    every member may be.
    """

    rows: int
    members_left: str | None = None


@dataclass(frozen=True)
class _Shape:
    """A SQL source's columns as staging reads them.

    ``fields`` maps the API fields the source has to their columns as SQL; ``text`` names those whose
    column is text.
    """

    columns: list[str]
    fields: dict[str, str]
    text: set[str]


def difference_table(stage: str) -> str:
    """The temporary table of the source rows and members that differ, beside the stage ``stage``."""
    return f"{stage}_diff"


def stage_table_sql(dialect: Dialect) -> str:
    """The temporary table's columns, its keys compared exactly as the state tables' are, and where a
    dialect needs one, the index the removals look members up by."""
    key, text = dialect.text_sql(255), dialect.text_sql()
    return (
        f"record BIGINT, line BIGINT, account_id {key}, crm_org_id {key}, crm_type {key}, "
        f"account_name {key}, row_hash {dialect.text_sql(64)}, reason {text}, raw {text}"
        f"{dialect.key_index_sql(['account_id', 'crm_org_id'])}"
    )


def staged_hash_sql(dialect: Dialect) -> str:
    """SQL for the hash of a valid staged row ``s``: as staged, or where SQL staged it without one,
    computed there: :func:`~abm_provider.accounts.sync.row_values.account_hash` of the same values."""
    if not dialect.has_rules_in_sql:
        return "s.row_hash"  # this database stages in Python, which hashes every row
    values = ["s.account_id", "COALESCE(s.account_name, '')", "s.crm_org_id", "COALESCE(s.crm_type, '')"]
    return f"COALESCE(s.row_hash, {dialect.md5_sql(values)})"


@dataclass(frozen=True)
class Stager:
    """Fills a run's temporary table from its source, in the warehouse where it can."""

    db: StateDatabase
    options: SyncOptions
    validator: AccountValidator
    log: logging.Logger | Any

    def stage(self, source: AccountSource, stage: str, members: str | None = None) -> Staged:
        """Stage the source rows into ``stage``, and say how many were read.

        With ``members`` (the members table, for a list that has members and a run that sends only
        the change), a source on the state connection is first compared with the list's members in
        the warehouse: a row equal to a member's recorded values (valid when it was recorded, and the
        validator gives back what it gave) is neither staged nor validated again, so a run that finds
        the list in step stages only what changed.
        """
        query = self._warehouse_query(source)
        if query is not None:
            staged = self._stage_in_warehouse(query, source.description, stage, members)
            if staged is not None:
                return staged
        return Staged(self._stage_in_python(source, stage))

    def _warehouse_query(self, source: AccountSource) -> WarehouseQuery | None:
        """The source as SQL the state connection runs itself, or ``None``."""
        if not isinstance(source, SqlSource) or not self.db.dialect.has_rules_in_sql:
            return None
        conn_id = self.db.dialect.conn_id
        return None if conn_id is None else source.query_on(conn_id, self.db.dialect)

    # ---- in Python ---------------------------------------------------------------------------------

    def _stage_in_python(self, source: AccountSource, stage: str) -> int:
        """Validate and hash every source row into the temporary table."""
        with source.open() as opened:
            self.validator.check_columns(opened.columns, source.description)
            return self._stage_rows(opened.rows, stage, "source rows read")

    def _stage_rows(self, rows: Iterable[SourceRow], stage: str, what: str) -> int:
        """Write ``rows`` validated and hashed in bulk chunks, with progress; return how many."""
        buffer: list[tuple[Any, ...]] = []
        count = 0
        started = last = time.monotonic()
        for row in rows:
            count += 1
            buffer.append(staged_row(row, self.validator))
            if len(buffer) >= self.options.stage_rows:
                self.db.stage(stage, STAGE_COLUMNS, buffer)
                buffer = []
                now = time.monotonic()
                if now - last >= self.options.progress_interval:
                    last = now
                    self.log.info("Planning: %d %s (%.0f rows/s)", count, what, count / (now - started))
        self.db.stage(stage, STAGE_COLUMNS, buffer)
        self.log.info("Planning: %d %s in %.1f s", count, what, time.monotonic() - started)
        return count

    # ---- in the warehouse --------------------------------------------------------------------------

    def _stage_in_warehouse(
        self, query: WarehouseQuery, description: str, stage: str, members: str | None
    ) -> Staged | None:
        """Stage a query on the state connection in SQL; ``None`` (stage in Python) when it cannot."""
        db = self.db
        started = time.monotonic()
        if not db.dialect.capabilities.full_outer_join:
            members = None  # staged whole: the plan compares it with the members
        # A table compared with the members is read twice rather than copied whole: counted, then
        # numbered inside the comparison, which keeps only the rows that differ. Anything else (the
        # user's own query above all) is run once, as written, into a numbered table that every later
        # step reads, so no statement of the sync holds the user's text.
        inline = members is not None and query.is_table and db.dialect.embeddable(query.text)
        numbered = None if inline else self._number(query)
        if numbered is None and not inline:
            return None
        try:
            rows = numbered or f"({db.dialect.numbered_sql(query.text, _RECORD)})"
            shape = self._shape(rows, description)
            if shape is None:
                return None
            counted = numbered or f"(\n{query.text}\n)"  # a table is counted without numbering it
            count = int(db.value(f"SELECT COUNT(*) FROM {counted} n") or 0)
            members_left, considered = None, count
            if members is not None:
                members_left = self._differ(rows, difference_table(stage), members, shape)
                rows = difference_table(stage)
                considered = int(db.value(f"SELECT COUNT(*) FROM {rows} WHERE {_RECORD} IS NOT NULL") or 0)
            plain, plain_params = self._plain_sql(shape.fields, shape.text)
            values, value_params = self._values_sql(shape.fields, shape.text)
            db.execute(
                f"INSERT INTO {stage} ({', '.join(STAGE_COLUMNS)}) SELECT {values} FROM {rows} n "
                f"WHERE {_RECORD} IS NOT NULL AND {plain}",
                [*value_params, *plain_params],
            )
            self.log.info(
                "Planning: %d source rows staged in the warehouse in %.1f s%s",
                count,
                time.monotonic() - started,
                "" if members is None else f" ({considered} differ from the list's members)",
            )
            # Asking for the others scans the rows again: skipped when the SQL staged them all.
            if int(db.value(f"SELECT COUNT(*) FROM {stage}") or 0) < considered:
                others = self._others(rows, shape.columns, plain, plain_params)
                self._stage_rows(others, stage, "source rows the rules in SQL left to Python")
        finally:
            if numbered is not None:
                db.execute(f"DROP TABLE IF EXISTS {numbered}")
        return Staged(count, members_left)

    def _number(self, query: WarehouseQuery) -> str | None:
        """Run the source query once into a numbered temporary table: its name, or ``None`` when the
        warehouse cannot run it so (the source is then read through its own connection).

        The query reaches the driver as the user wrote it, with the user's parameters as given, in the
        driver's own style; only its terminator is left out, which a subquery cannot hold.
        """
        statement = query.text if query.is_table else one_statement(query.text)
        if statement is None:
            self.log.info("Planning in Python: the source query is not one SQL statement")
            return None
        numbered = f"abm_sync_numbered_{uuid.uuid4().hex[:12]}"
        try:
            with self.db.transaction():
                self.db.run_query(
                    self.db.dialect.numbered_copy_sql(numbered, statement, _RECORD), query.parameters
                )
        except Exception as err:
            # Whatever the database makes of the query in a copy (a statement that is not a SELECT,
            # a column name repeated, a syntax of the driver's own), it still runs as written.
            first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
            self.log.info(
                "Planning in Python: the warehouse could not copy the source query's rows (%s)",
                first_line,
            )
            return None
        return numbered

    def _shape(self, rows: str, description: str) -> _Shape | None:
        """The source's columns as the rules in SQL read them; ``None`` when they cannot be read so.

        ``rows`` is the numbered source (a table, or a query in parentheses): its first column is the
        record number.
        """
        validator, dialect = self.validator, self.db.dialect
        pairs = dialect.described_columns(self.db.cur, rows)[1:]
        described = dict(pairs)
        columns = list(described)
        validator.check_columns(columns, description)
        if not described[validator.id_column]:
            self.log.info("Planning in Python: the id column %r is not a text column", validator.id_column)
            return None
        reserved = _RECORD in described or any(c.startswith(_MEMBER) for c in columns)
        awkward = len(pairs) != len(described) or reserved
        if awkward or any('"' in c or "`" in c or not dialect.embeddable(c) for c in columns):
            self.log.info(
                "Planning in Python: source columns repeat a name, hold a quote or a %r, or are named "
                "%r or %r...",
                "%",
                _RECORD,
                _MEMBER,
            )
            return None
        # Every column is copied (not only the mapped ones), so an invalid row's values are recorded whole.
        fields = {
            field: dialect.quote(column)
            for field, column in validator.column_map.items()
            if (field == "id" or field in validator.fields) and column in described
        }
        text = {f for f in fields if described[validator.column_map[f]]}
        return _Shape(columns, fields, text)

    def _differ(self, numbered: str, diff: str, members: str, shape: _Shape) -> str:
        """Fill ``diff`` with the numbered rows no member equals and the members no row equals.

        ``numbered`` is the numbered source: a table, or a query in parentheses.

        One full outer join: a row is equal to a member when its values, as the SQL rules would stage
        them, are the member's recorded ones. Returns the relation of the members left over.
        """
        mark = self.db.marker
        db = self.db
        member_columns = ", ".join(f"m.{c} AS {_MEMBER}{c}" for c in _MEMBER_COLUMNS)
        db.execute(
            f"CREATE TEMPORARY TABLE {diff} AS SELECT n.*, {member_columns} FROM {numbered} n, "
            f"{members} m WHERE 1 = 0"
        )
        qualified = {field: f"n.{column}" for field, column in shape.fields.items()}
        staged, params = self._staged_values(qualified, shape.text)
        account_id, org, crm_type, name = staged
        # The keys compare bare (an id is never NULL on a member, an org never NULL on either side), so
        # the join hashes them as they are; a type or name may be NULL on both sides.
        equal = (
            f"{account_id} = m.account_id AND {org} = m.crm_org_id "
            f"AND COALESCE({crm_type}, '') = COALESCE(m.crm_type, '') "
            f"AND COALESCE({name}, '') = COALESCE(m.account_name, '')"
        )
        db.execute(
            f"INSERT INTO {diff} SELECT n.*, {member_columns} FROM {numbered} n FULL OUTER JOIN "
            f"(SELECT * FROM {members} WHERE list_id = {mark}) m ON {equal} "
            f"WHERE n.{_RECORD} IS NULL OR m.account_id IS NULL",
            [self.options.list_id, *params],
        )
        # Without statistics the removals would take the members left for one row, and look each up
        # in the stage by a scan.
        db.analyze(diff)
        columns = ", ".join(f"{_MEMBER}{c} AS {c}" for c in _MEMBER_COLUMNS)
        return f"(SELECT {columns} FROM {diff} WHERE {_RECORD} IS NULL)"

    def _plain_sql(self, fields: Mapping[str, str], text: set[str]) -> tuple[str, list[Any]]:
        """A condition on a numbered row: the validator would send its values as they are.

        ``fields`` maps the API fields the source has to their columns as SQL; ``text`` names those
        whose column is text (a column of another type is plain only when ``NULL``).
        """
        matches, length = self.db.dialect.matches_sql, self.validator.max_field_length
        account_id = fields["id"]
        checks = [
            f"{account_id} IS NOT NULL AND {matches(account_id, _PLAIN_ID)} "
            f"AND LENGTH({account_id}) <= {length}"
        ]
        params: list[Any] = []
        for field in ("name", "crmOrgId"):
            if field in fields:
                column = fields[field]
                plain = f"{matches(column, _PLAIN_TEXT)} AND LENGTH({column}) <= {length}"
                checks.append(f"({column} IS NULL OR ({plain}))" if field in text else f"{column} IS NULL")
        if "crmType" in fields:
            column = fields["crmType"]
            exact = self.db.dialect.exact_sql(column)  # "salesforce" is not a known type
            known = sorted(self.validator.crm_types)
            listed = f"{exact} IN ({self.db.marks(len(known))})" if known else "1 = 0"
            if "crmType" in text:
                checks.append(f"({column} IS NULL OR {exact} = '' OR {listed})")
                params.extend(known)
            else:
                checks.append(f"{column} IS NULL")
        return " AND ".join(checks), params

    def _staged_values(self, fields: Mapping[str, str], text: set[str]) -> tuple[list[str], list[Any]]:
        """SQL for the id, org, type and name a plain row is staged with, as the validator makes them."""
        validator, dialect = self.validator, self.db.dialect
        nothing = dialect.cast_sql("NULL", "TEXT")

        def given(field: str) -> str:
            return f"NULLIF({fields[field]}, '')" if field in text else nothing

        org = f"COALESCE({given('crmOrgId')}, {dialect.text_param()})"
        params: list[Any] = [(validator.default_crm_org_id or "") if "crmOrgId" in validator.fields else ""]
        if "crmType" in validator.fields:
            crm_type = f"COALESCE({given('crmType')}, {dialect.text_param()})"
            params.append(validator.default_crm_type)
        else:
            crm_type = nothing
        return [fields["id"], org, crm_type, given("name")], params

    def _values_sql(self, fields: Mapping[str, str], text: set[str]) -> tuple[str, list[Any]]:
        """The stage columns of a plain numbered row, as the validator would make them."""
        (account_id, org, crm_type, name), params = self._staged_values(fields, text)
        cast = self.db.dialect.cast_sql
        nothing = cast("NULL", "TEXT")
        # No hash: the plan computes it for the few rows that need one (those not yet on the list).
        values = (
            f"{_RECORD}, {cast('NULL', 'BIGINT')}, {account_id}, {org}, {crm_type}, {name}, {nothing}, "
            f"{nothing}, {nothing}"
        )
        return values, params

    def _others(
        self, numbered: str, columns: list[str], plain: str, plain_params: list[Any]
    ) -> Iterator[SourceRow]:
        """The numbered rows the rules in SQL did not prove plain, as source rows, a page at a time.

        Pages by record number, so the one cursor can stage each page before the next is read.
        """
        mark = self.db.marker
        selected = ", ".join(self.db.dialect.quote(c) for c in columns)
        after, page = 0, self.options.stage_rows
        while True:
            rows = self.db.rows(
                f"SELECT {_RECORD}, {selected} FROM {numbered} WHERE {_RECORD} > {mark} "
                f"AND NOT ({plain}) ORDER BY {_RECORD} LIMIT {page}",
                [after, *plain_params],
            )
            for record, *values in rows:
                yield SourceRow(int(record), None, dict(zip(columns, values, strict=True)))
            if len(rows) < page:
                return
            after = int(rows[-1][0])
