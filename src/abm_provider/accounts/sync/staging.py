"""A sync run's source, staged in the warehouse: one row per source row, validated and hashed.

Two ways fill the same work table (:data:`~abm_provider.accounts.sync.statements.staging.STAGE_COLUMNS`),
with the statements of :mod:`~abm_provider.accounts.sync.statements.staging`:

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
  :func:`~abm_provider.accounts.sync.statements.staging.staged_hash_sql` has computed it.
- **In Python** for every other source: each row is validated and hashed here, and written in bulk.

Either way memory stays flat whatever the source's size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sources import SqlSource, WarehouseQuery
from abm_provider.accounts.sync.row_values import staged_row
from abm_provider.accounts.sync.statements import staging as statements
from abm_provider.accounts.sync.statements.binding import Sql, text
from abm_provider.accounts.sync.statements.staging import MEMBER, RECORD, STAGE_COLUMNS
from abm_provider.accounts.sync.statements.tables import WorkTables, create_work_table_as, drop_table
from abm_provider.accounts.sync.work_source import StateQuerySource
from abm_provider.accounts.validation import SourceRow
from abm_provider.common.sql import one_statement

if TYPE_CHECKING:
    from abm_provider.accounts.sources import AccountSource
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.validation import AccountValidator


@dataclass(frozen=True)
class Staged:
    """What staging a source left for the plan.

    ``members_left``: where the source was compared with the list's members in the warehouse, a
    relation of the members no source row equals (the only ones the run may remove); ``None`` when
    every member may be.
    """

    rows: int
    members_left: Sql | None = None


@dataclass(frozen=True)
class SourceShape:
    """A SQL source's columns as staging reads them.

    ``fields`` maps the API fields the source has to their columns as SQL; ``text`` names those whose
    column is text.
    """

    columns: list[str]
    fields: dict[str, str]
    text: set[str]


@dataclass(frozen=True)
class Stager:
    """Fills a run's stage from its source, in the warehouse where it can.

    ``work``: the run's work tables, where the comparison with the members and the numbered copy of a
    query go (new ones, temporary, when not given).
    """

    db: StateDatabase
    options: SyncOptions
    validator: AccountValidator
    log: logging.Logger | Any
    work: WorkTables | None = None

    def stage(
        self, source: AccountSource | StateQuerySource, stage: str, members: Sql | None = None
    ) -> Staged:
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

    def _warehouse_query(self, source: AccountSource | StateQuerySource) -> WarehouseQuery | None:
        """The source as SQL the state connection runs itself, or ``None``."""
        if not isinstance(source, SqlSource | StateQuerySource) or not self.db.dialect.has_rules_in_sql:
            return None
        conn_id = self.db.dialect.conn_id
        return None if conn_id is None else source.query_on(conn_id, self.db.dialect)

    @cached_property
    def _work(self) -> WorkTables:
        return self.work or WorkTables.new(self.db.dialect, None)

    # ---- in Python ---------------------------------------------------------------------------------

    def _stage_in_python(self, source: AccountSource | StateQuerySource, stage: str) -> int:
        """Validate and hash every source row into the stage."""
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
        self, query: WarehouseQuery, description: str, stage: str, members: Sql | None
    ) -> Staged | None:
        """Stage a query on the state connection in SQL; ``None`` (stage in Python) when it cannot."""
        db, dialect = self.db, self.db.dialect
        started = time.monotonic()
        if not dialect.capabilities.full_outer_join:
            members = None  # staged whole: the plan compares it with the members
        # A table compared with the members is read twice rather than copied whole: counted, then
        # numbered inside the comparison, which keeps only the rows that differ. Anything else (the
        # user's own query above all) is run once, as written, into a numbered table that every later
        # step reads, so no statement of the sync holds the user's text.
        inline = query.numbered or (members is not None and query.is_table and dialect.embeddable(query.text))
        numbered = None if inline else self._number(query)
        if numbered is None and not inline:
            return None
        try:
            rows = numbered or (
                f"({query.text})" if query.numbered else f"({dialect.numbered_sql(query.text, RECORD)})"
            )
            shape = self.shape(rows, description)
            if shape is None:
                return None
            count = query.rows
            if count is None:
                counted = numbered or f"(\n{query.text}\n)"  # a table is counted without numbering it
                count = int(db.value(statements.count(text(counted))) or 0)
            members_left, considered = None, count
            if members is not None:
                members_left = self._differ(rows, members, shape)
                rows = self._work.difference
                considered = int(db.value(statements.count(text(rows), statements.source_row())) or 0)
            plain = statements.plain(dialect, self.validator, shape.fields, shape.text)
            staged_values = statements.staged_values(dialect, self.validator, shape.fields, shape.text)
            db.execute(statements.insert_plain(dialect, stage, text(rows), staged_values, plain))
            self.log.info(
                "Planning: %d source rows staged in the warehouse in %.1f s%s",
                count,
                time.monotonic() - started,
                "" if members is None else f" ({considered} differ from the list's members)",
            )
            # Asking for the others scans the rows again: skipped when the SQL staged them all.
            if int(db.value(statements.count(text(stage))) or 0) < considered:
                others = self._others(rows, shape.columns, plain)
                self._stage_rows(others, stage, "source rows the rules in SQL left to Python")
        finally:
            if numbered is not None:
                db.execute(drop_table(numbered))
        return Staged(count, members_left)

    def _number(self, query: WarehouseQuery) -> str | None:
        """Run the source query once into a numbered work table: its name, or ``None`` when the
        warehouse cannot run it so (the source is then read through its own connection).

        The query reaches the driver as the user wrote it, with the user's parameters as given, in the
        driver's own style; only its terminator is left out, which a subquery cannot hold.
        """
        statement = query.text if query.is_table else one_statement(query.text)
        if statement is None:
            self.log.info("Planning in Python: the source query is not one SQL statement")
            return None
        numbered = self._work.numbered
        refused = self.db.copy_query(numbered, statement, query.parameters)
        if refused is not None:
            self.log.info(
                "Planning in Python: the warehouse could not copy the source query's rows (%s)", refused
            )
            return None
        return numbered

    def shape(self, rows: str, description: str) -> SourceShape | None:
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
        reserved = RECORD in described or any(c.startswith(MEMBER) for c in columns)
        awkward = len(pairs) != len(described) or reserved
        if awkward or any('"' in c or "`" in c or not dialect.embeddable(c) for c in columns):
            self.log.info(
                "Planning in Python: source columns repeat a name, hold a quote or a %r, or are named "
                "%r or %r...",
                "%",
                RECORD,
                MEMBER,
            )
            return None
        # Every column is copied (not only the mapped ones), so an invalid row's values are recorded whole.
        fields = {
            field: dialect.quote(column)
            for field, column in validator.column_map.items()
            if (field == "id" or field in validator.fields) and column in described
        }
        text = {f for f in fields if described[validator.column_map[f]]}
        return SourceShape(columns, fields, text)

    def _differ(self, numbered: str, members: Sql, shape: SourceShape) -> Sql:
        """Fill the difference with the numbered rows no member equals and the members no row equals.

        ``numbered`` is the numbered source: a table, or a query in parentheses. Returns the relation
        of the members left over.
        """
        db, dialect, diff = self.db, self.db.dialect, self._work.difference
        db.execute(create_work_table_as(dialect, diff, statements.difference_shape(text(numbered), members)))
        qualified = {field: f"n.{column}" for field, column in shape.fields.items()}
        staged_values = statements.staged_values(dialect, self.validator, qualified, shape.text)
        db.execute(
            statements.insert_difference(diff, text(numbered), members, self.options.list_id, staged_values)
        )
        # Without statistics the removals would take the members left for one row, and look each up
        # in the stage by a scan.
        db.analyze(diff)
        return statements.members_left(diff)

    def _others(self, numbered: str, columns: list[str], plain: Sql) -> Iterator[SourceRow]:
        """The numbered rows the rules in SQL did not prove plain, as source rows, a page at a time.

        Pages by record number, so the one cursor can stage each page before the next is read.
        """
        selected = ", ".join(self.db.dialect.quote(c) for c in columns)
        after, page = 0, self.options.stage_rows
        while True:
            rows = self.db.rows(statements.other_rows(text(numbered), selected, plain, after, page))
            for record, *values in rows:
                yield SourceRow(int(record), None, dict(zip(columns, values, strict=True)))
            if len(rows) < page:
                return
            after = int(rows[-1][0])
