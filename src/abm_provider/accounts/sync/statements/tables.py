"""The tables the sync's statements name: the state tables as one database's SQL, and a run's work tables.

A run plans through work tables of its own (the staged source, the rows that may be added, the
difference of a source and the members, the numbered copy of a source query). Where the dialect
declares ``temporary_tables`` they are the session's temporary tables, which no other session sees
and which go with the connection; elsewhere they are ordinary tables beside the state tables, with a
name no other run takes, dropped when the plan is written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.statements.binding import Sql, sql, text
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from abm_provider.accounts.sync.state import StateTables
    from abm_provider.warehouse.dialects import Dialect

#: Work table names start with this, and a run's own part follows.
WORK_PREFIX = "abm_sync_"


@dataclass(frozen=True)
class StateSql:
    """What every statement reads: the state database's dialect, and the state tables' names in its SQL."""

    dialect: Dialect
    members: Sql
    plan: Sql
    rejects: Sql
    runs: Sql
    log: Sql

    @classmethod
    def of(cls, dialect: Dialect, tables: StateTables) -> StateSql:
        """``tables`` as ``dialect`` names them."""
        names = tables.in_sql(dialect)
        return cls(
            dialect,
            text(names.members),
            text(names.plan),
            text(names.rejects),
            text(names.runs),
            text(names.log),
        )

    def sql(self, template: str, /, **fields: Any) -> Sql:
        """``template`` as :func:`~.binding.sql` fills it, with the state tables' names standing for
        ``{members}``, ``{plan}``, ``{rejects}``, ``{runs}`` and ``{log}``: every statement names a state
        table the one way, and gives only its own ``fields``."""
        return sql(template, **{name: getattr(self, name) for name in _TABLES}, **fields)


#: The state tables' fields of :class:`StateSql`, as its templates name them.
_TABLES = ("members", "plan", "rejects", "runs", "log")


@dataclass(frozen=True)
class WorkTables:
    """The names (as SQL) of one run's work tables: the staged source, the rows that may be added, the
    difference of a source and the members, and the numbered copy of a source query.

    Each ``abm_sync_<kind>_<12 hex digits>``, the same digits for one run, which no other run takes.
    """

    stage: str
    candidates: str
    difference: str
    numbered: str

    @classmethod
    def new(cls, dialect: Dialect, schema: str | None) -> WorkTables:
        """New names: temporary tables where ``dialect`` has them, else tables in ``schema``."""
        token = uuid.uuid4().hex[:12]

        def name(kind: str) -> str:
            table = f"{WORK_PREFIX}{kind}_{token}"
            if dialect.capabilities.temporary_tables:
                return table  # a temporary table takes no schema
            return dialect.table_sql(TableName(schema, table))

        return cls(name("source"), name("new"), name("diff"), name("numbered"))


def create_work_table(dialect: Dialect, table: str, columns: str) -> Sql:
    """``CREATE [TEMPORARY] TABLE`` of a work table with ``columns`` (their SQL, as the dialect spells it)."""
    return sql(
        "CREATE {kind} {table} ({columns})", kind=_kind(dialect), table=text(table), columns=text(columns)
    )


def create_work_table_as(dialect: Dialect, table: str, select: Sql) -> Sql:
    """A work table with the columns (and rows) of ``select``."""
    return sql("CREATE {kind} {table} AS {select}", kind=_kind(dialect), table=text(table), select=select)


def drop_table(table: str) -> Sql:
    """Drop a work table, if it was made."""
    return sql("DROP TABLE IF EXISTS {table}", table=text(table))


def _kind(dialect: Dialect) -> Sql:
    return text("TEMPORARY TABLE" if dialect.capabilities.temporary_tables else "TABLE")
