"""The programme's source in the warehouse: each row given its list, excluded accounts marked, once a run.

An audience sync reads one source whose audience column names each account's tier. Before any list
is planned, the source is copied once into a work table of the state connection, the *tiered* table:

- a table on the state connection is numbered as it is copied; a query there is run once, as
  written, with its parameters, into a numbered work table first; any other source (another
  connection, a file) is read through Python into a work table of text columns;
- the exclusions (tables, queries or files of account ids, and lists another sync keeps, through
  their recorded members) are gathered into a work table of ids first, so each row knows whether its
  account is excluded;
- each row gets its audience's place in the priority order and the best place any row of its account
  has. A list then keeps only the rows of its place that are their account's best and not excluded
  (:func:`~abm_provider.accounts.audiences.statements.assigned`), so no account is assigned to two
  lists, and no excluded account to any.

Once a list of the programme has members, the source is first compared with every member of the
programme in one full outer join on the account's key
(:func:`~abm_provider.accounts.audiences.statements.insert_changed`). An account whose rows all name
the list it is on, with the values recorded there, stays as it is; only the others (and the excluded)
go into the tiered table, and each list's planner compares them with their members alone. So a
programme in step with its source tiers and plans only what changed: one pass over the source, not a
copy of it.

Each list's rows reach the list sync's planner as a
:class:`~abm_provider.accounts.sync.work_source.StateQuerySource`,
keeping their record numbers in the user's source.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.audiences import move_statements, statements
from abm_provider.accounts.audiences.source_rows import chunks, texts, value_of
from abm_provider.accounts.sources import SqlSource
from abm_provider.accounts.sync.staging import Stager
from abm_provider.accounts.sync.statements.binding import text
from abm_provider.accounts.sync.statements.plan import has_rows
from abm_provider.accounts.sync.statements.staging import RECORD, staged_values
from abm_provider.accounts.sync.statements.tables import (
    WORK_PREFIX,
    create_work_table,
    create_work_table_as,
    drop_table,
)
from abm_provider.accounts.sync.summary import member_counts
from abm_provider.accounts.sync.work_source import StateQuerySource
from abm_provider.common.sql import one_statement
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from abm_provider.accounts.sources import AccountSource
    from abm_provider.accounts.sync.database import StateDatabase
    from abm_provider.accounts.sync.options import SyncOptions
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.accounts.validation import AccountValidator

#: Audience values shown when rows name audiences the programme does not map.
_SAMPLE = 5


@dataclass(frozen=True)
class Exclusion:
    """Accounts kept off every list of the programme: the ids in ``id_column`` of ``source``."""

    source: AccountSource
    id_column: str


@dataclass(frozen=True)
class Tier:
    """One place of the tiered table: how many source rows name its audience, how many its list keeps,
    how many lose to a higher audience of the same account, and how many are excluded."""

    rows: int = 0
    kept: int = 0
    outranked: int = 0
    excluded: int = 0


@dataclass
class Tiered:
    """The tiered table of one run: its name, the source's columns, and the rows per place.

    ``members``: where the run compared the source with the programme's members first, the work table
    of the members of the accounts it tiers again (the others keep their lists); ``None`` when the
    table holds every source row, to be compared with every member.

    ``member_counts``: each list's recorded members before the run, counted once for the programme,
    so that its lists' plans need not count them each. ``repeats``: whether some account has two
    rows or more in the table (with none, no list's rows repeat a key).
    """

    table: str
    columns: list[str]
    rows: int
    tiers: dict[int, Tier] = field(default_factory=dict)
    unmapped: int = 0
    unmapped_values: list[str] = field(default_factory=list)
    members: str | None = None
    member_counts: dict[str, int] = field(default_factory=dict)
    repeats: bool = True


@dataclass
class Tiering:
    """Builds and drops one run's tiered table and the work tables behind it.

    ``values``: the audience values in priority order (the first is the highest); ``list_ids`` the
    lists in the same order.
    """

    db: StateDatabase
    tables: StateTables
    options: SyncOptions
    validator: AccountValidator
    column: str
    values: Sequence[str]
    list_ids: Sequence[str]
    exclusions: Sequence[Exclusion]
    exclude_lists: Sequence[str]
    log: logging.Logger | Any
    _made: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        token = uuid.uuid4().hex[:12]
        self.excluded = self._name(f"excl_{token}")
        self.copied = self._name(f"rows_{token}")
        self.tiered = self._name(f"tiers_{token}")
        self.removed = self._name(f"gone_{token}")
        self.added = self._name(f"came_{token}")
        self.outranked = self._name(f"best_{token}")
        self.changed = self._name(f"chg_{token}")
        self.changed_members = self._name(f"mchg_{token}")

    def _name(self, table: str) -> str:
        dialect = self.db.dialect
        if dialect.capabilities.temporary_tables:
            return f"{WORK_PREFIX}{table}"
        return dialect.table_sql(TableName(self.tables.members.schema, f"{WORK_PREFIX}{table}"))

    def _create(self, table: str, columns: str) -> None:
        with self.db.transaction():
            self.db.execute(create_work_table(self.db.dialect, table, columns))
        self._made.append(table)

    def drop(self) -> None:
        """Drop every work table this run made."""
        for table in reversed(self._made):
            self.db.execute(drop_table(table))
        self._made.clear()

    # ---- building ------------------------------------------------------------------------------

    def build(self, source: AccountSource) -> Tiered:
        """Gather the exclusions, copy the source, and make the tiered table; return what it holds."""
        started = time.monotonic()
        dialect = self.db.dialect
        self._create(self.excluded, statements.excluded_columns(dialect))
        self._create(self.removed, move_statements.removed_columns(dialect))
        self._create(self.added, move_statements.removed_columns(dialect))
        self._create(self.outranked, statements.outranked_columns(dialect))
        for exclusion in self.exclusions:
            self._exclude(exclusion)
        if self.exclude_lists:
            self._exclude_members()
        numbered, rows = self._numbered(source)
        columns = [name for name, _ in dialect.described_columns(self.db.cur, numbered)][1:]
        self._check_columns(columns, source.description)
        org = self.validator.column_map.get("crmOrgId")
        keys = statements.RowKeys(
            self.column,
            self.values,
            self.validator.id_column,
            org if org in columns and "crmOrgId" in self.validator.fields else None,
            self.validator.default_crm_org_id,
        )
        members = member_counts(self.db, self.tables, self.list_ids)
        changed = self._compare(numbered, rows, keys, members)
        only = None if changed is None else self.changed
        select = statements.tiered(dialect, text(numbered), self.excluded, keys, only)
        with self.db.transaction():
            self.db.execute(create_work_table_as(dialect, self.tiered, select))
        self._made.append(self.tiered)
        with self.db.transaction():
            self.db.execute(statements.insert_outranked(dialect, self.tiered, self.outranked))
        self.db.analyze(self.tiered, self.outranked)
        tiered = self._count(columns)
        tiered.member_counts = members
        # Trusted only where the keys are stripped as the validator strips them: elsewhere two rows the
        # grouping told apart (an id with a tab after it) can be one account to the planner.
        tiered.repeats = (
            not dialect.capabilities.strips_like_python
            or self.db.value(statements.any_outranked(self.outranked)) is not None
        )
        if changed is not None:
            self._add_in_step(tiered)
            tiered.members = self.changed_members
        self.log.info(
            "Audiences: %d source rows tiered in %.1f s (%s)%s",
            tiered.rows,
            time.monotonic() - started,
            ", ".join(
                f"{value}: {tiered.tiers.get(i, Tier()).kept} kept"
                for i, value in enumerate(self.values, start=1)
            ),
            "" if changed is None else f"; {changed} accounts changed, the others in step with their lists",
        )
        return tiered

    def _compare(
        self, numbered: str, rows: str, keys: statements.RowKeys, members: dict[str, int]
    ) -> int | None:
        """Find the accounts whose rows or memberships changed, and their members; how many, or
        ``None`` when the run tiers every row (a first run, a full resync, a database without full
        outer joins or the rules in SQL, columns the rules cannot read).

        One full outer join of the source with the programme's members on the account's key
        (:func:`~abm_provider.accounts.audiences.statements.insert_changed`): a programme in step
        with its source tiers only what changed since. ``members``: each list's recorded members (a
        programme with none has nothing to compare with).
        """
        db, dialect = self.db, self.db.dialect
        able = dialect.capabilities.full_outer_join and dialect.has_rules_in_sql
        if self.options.full_resync or not able:
            return None
        state = db.state_sql(self.tables)
        if not any(members.values()):
            return None
        shape = Stager(db, self.options, self.validator, self.log).shape(numbered, "audience source")
        if shape is None:
            return None
        staged = staged_values(
            dialect, self.validator, {f: f"t.{c}" for f, c in shape.fields.items()}, shape.text
        )
        self._create(self.changed, statements.changed_columns(dialect))
        with db.transaction():
            db.execute(
                statements.insert_changed(
                    state, self.changed, text(rows), self.excluded, keys, self.list_ids, staged
                )
            )
            db.execute(statements.insert_changed_keys(self.changed))
        db.analyze(self.changed)
        changed_members = statements.changed_members(state, self.changed, self.list_ids)
        with db.transaction():
            db.execute(create_work_table_as(dialect, self.changed_members, changed_members))
        self._made.append(self.changed_members)
        db.analyze(self.changed_members)
        return int(db.value(statements.changed_accounts(self.changed)) or 0)

    def _add_in_step(self, tiered: Tiered) -> None:
        """Count the accounts left in step (each on its list, every row of it naming that list) in
        their list's rows and kept rows, and in the source's: a list's members less those of the
        changed accounts."""
        changed = dict(self.db.rows(statements.changed_member_counts(self.changed_members)))
        for place, list_id in enumerate(self.list_ids, start=1):
            accounts = tiered.member_counts[list_id] - int(changed.get(list_id) or 0)
            tier = tiered.tiers.get(place, Tier())
            tiered.tiers[place] = replace(tier, rows=tier.rows + accounts, kept=tier.kept + accounts)
            tiered.rows += accounts

    def _exclude_members(self) -> None:
        """Add the recorded members of ``exclude_lists``; warn of a list with none recorded (kept by no
        sync on these state tables, or not yet synced), which excludes nothing."""
        state = self.db.state_sql(self.tables)
        with self.db.transaction():
            self.db.execute(statements.insert_excluded_members(state, self.excluded, self.exclude_lists))
        for list_id in self.exclude_lists:
            if self.db.value(has_rows(state.members, list_id)) is None:
                self.log.warning(
                    "Audiences: exclude_lists names list %s, which has no members recorded in %s; it "
                    "excludes nothing (is it kept by a sync on these state tables?)",
                    list_id,
                    self.db.names(self.tables).members,
                )

    def source_of(self, tiered: Tiered, place: int) -> StateQuerySource:
        """The rows the list at ``place`` keeps, as its planner reads them."""
        quoted = ", ".join(self.db.dialect.quote(c) for c in tiered.columns)
        relation = statements.assigned(tiered.table, self.outranked, place, quoted)
        return StateQuerySource(
            self.db,
            relation,
            tiered.columns,
            f"audience {self.values[place - 1]!r}'s rows",
            self.options.stage_rows,
            rows=tiered.tiers.get(place, Tier()).kept,
        )

    def _check_columns(self, columns: list[str], description: str) -> None:
        """Refuse a source without the audience column or the id column, or with a column the tiered
        table names itself, before anything is planned."""
        if self.column not in columns:
            raise ValueError(
                f"The {description} has no audience column {self.column!r} (columns: {columns}); set "
                "audience_column to the column that names each account's audience"
            )
        self.validator.check_columns(columns, description)
        taken = sorted(set(columns) & set(statements.RESERVED))
        if taken:
            raise ValueError(
                f"The {description} has columns {taken}, names the audience sync gives its own work "
                "columns; rename them in the source"
            )

    def _count(self, columns: list[str]) -> Tiered:
        """The rows per place of the tiered table, and a sample of the audiences not mapped."""
        tiered = Tiered(self.tiered, columns, 0)
        for place, rows, kept, outranked, excluded in self.db.rows(
            statements.tier_counts(self.tiered, self.outranked)
        ):
            tiered.rows += int(rows)
            if place is None:
                tiered.unmapped = int(rows)
                continue
            tiered.tiers[int(place)] = Tier(
                int(rows), int(kept or 0), int(outranked or 0), int(excluded or 0)
            )
        if tiered.unmapped:
            sample = self.db.rows(
                statements.unmapped_sample(self.db.dialect, self.tiered, self.column, _SAMPLE)
            )
            tiered.unmapped_values = [str(r[0]) for r in sample]
            self.log.warning(
                "Audiences: %d source rows name an audience the programme does not map (e.g. %s); they "
                "are on no list",
                tiered.unmapped,
                tiered.unmapped_values,
            )
        return tiered

    # ---- the source, numbered --------------------------------------------------------------------

    def _numbered(self, source: AccountSource) -> tuple[str, str]:
        """The source as a numbered relation on the state connection (record number first), and as
        rows to compare with the members, the same rows without the numbering where it costs a pass."""
        dialect = self.db.dialect
        conn_id = dialect.conn_id
        query = source.query_on(conn_id, dialect) if isinstance(source, SqlSource) and conn_id else None
        if query is not None and query.is_table and dialect.embeddable(query.text):
            return f"({dialect.numbered_sql(query.text, RECORD)})", f"({query.text})"
        if query is not None:
            statement = one_statement(query.text)
            if statement is not None and self._copy_query(statement, query.parameters):
                return self.copied, self.copied
        copied = self._copy_in_python(source)
        return copied, copied

    def _copy_query(self, statement: str, parameters: Any) -> bool:
        """Run the user's query once, as written, into the numbered work table; whether it could."""
        refused = self.db.copy_query(self.copied, statement, parameters)
        if refused is not None:
            self.log.info("Audiences: the warehouse could not copy the source query's rows (%s)", refused)
            return False
        self._made.append(self.copied)
        return True

    def _copy_in_python(self, source: AccountSource) -> str:
        """Read the source through its own connection or file into a work table of text columns.

        The columns are stored under plain names (``abm_c1``...) and read back under the source's,
        whatever characters those hold.
        """
        with source.open() as opened:
            if opened.columns is None:
                raise ValueError(f"The {source.description} has no fixed columns; an audience needs them")
            columns = list(opened.columns)
            plain = [f"abm_c{i}" for i in range(1, len(columns) + 1)]
            long_text = self.db.dialect.text_sql()
            self._create(self.copied, ", ".join([f"{RECORD} BIGINT", *(f"{c} {long_text}" for c in plain)]))
            names = [RECORD, *plain]
            count = 0
            for chunk in chunks(opened.rows, self.options.stage_rows):
                with self.db.transaction():
                    self.db.stage(
                        self.copied, names, [(r.row_number, *texts(r.data, columns)) for r in chunk]
                    )
                count += len(chunk)
            self.log.info("Audiences: %d source rows read into the warehouse", count)
        quote = self.db.dialect.quote
        renamed = ", ".join(f"{p} AS {quote(c)}" for p, c in zip(plain, columns, strict=True))
        return f"(SELECT {RECORD}, {renamed} FROM {self.copied})"

    def _exclude(self, exclusion: Exclusion) -> None:
        """Add one exclusion source's ids to the excluded ones: in SQL on the state connection, else
        through Python."""
        dialect = self.db.dialect
        conn_id = dialect.conn_id
        source = exclusion.source
        query = source.query_on(conn_id, dialect) if isinstance(source, SqlSource) and conn_id else None
        statement = None if query is None else one_statement(query.text)
        if query is not None and query.is_table and dialect.embeddable(query.text):
            self._exclude_rows(f"({query.text})", exclusion)
            return
        if query is not None and statement is not None:
            copy = self._name(f"xsrc_{uuid.uuid4().hex[:12]}")
            refused = self.db.copy_query(copy, statement, query.parameters)
            if refused is None:
                self._made.append(copy)
                self._exclude_rows(copy, exclusion)
                return
            self.log.info("Audiences: the exclusion query could not be copied (%s)", refused)
        with source.open() as opened:
            _check_id_column(opened.columns, exclusion)
            for chunk in chunks(opened.rows, self.options.stage_rows):
                ids = [(str(v).strip(),) for v in (value_of(r.data, exclusion.id_column) for r in chunk) if v]
                with self.db.transaction():
                    self.db.stage(self.excluded, ["account_id"], [i for i in ids if i[0]])

    def _exclude_rows(self, rows: str, exclusion: Exclusion) -> None:
        """Add the ids of ``rows`` (a table, or a query in parentheses, on the state connection)."""
        dialect = self.db.dialect
        columns = [name for name, _ in dialect.described_columns(self.db.cur, rows)]
        _check_id_column(columns, exclusion)
        with self.db.transaction():
            self.db.execute(
                statements.insert_excluded(dialect, self.excluded, text(rows), exclusion.id_column)
            )


def _check_id_column(columns: Sequence[str] | None, exclusion: Exclusion) -> None:
    """Refuse an exclusion whose source has no ``id_column``, naming both."""
    if columns is not None and exclusion.id_column not in columns:
        raise ValueError(
            f"The exclusion's {exclusion.source.description} has no column {exclusion.id_column!r} "
            f"(columns: {list(columns)}); set its id_column"
        )
