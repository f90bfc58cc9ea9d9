"""The load ledger: one row per committed load, written in the same transaction as the data.

Because the ledger row commits or rolls back with the rows it describes, "this execution and this
file are in the table" is exactly "the ledger has a row for them", which is what makes a re-run of
the same execution a safe no-op. The ledger lives in the target's schema so that it travels with
the data it describes (same backups, same grants).

The ledger also orders the loads of one table: ``execution_time`` (the execution's ``updateTime``)
says which execution is newer, and :func:`newer_sql` and :func:`newer_ids_sql` find the executions
in the table that are newer than the one loading (see :meth:`WarehouseLoader._replace`). A ledger
created before that column existed gets it added (:func:`missing_columns`, :func:`add_column_sql`)
by the first load that writes to it; its older rows have no time, so they count as older.

The SQL is spelled by the warehouse's dialect (quoting, parameter markers, casts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.dialects.base import Dialect

DEFAULT_LEDGER_TABLE = "abm_load_ledger"

LEDGER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("target_table", "TEXT NOT NULL"),
    ("execution_id", "TEXT"),
    ("export_type", "TEXT NOT NULL"),
    ("sha256", "TEXT NOT NULL"),
    ("source", "TEXT"),
    ("bytes", "BIGINT"),
    ("rows_loaded", "BIGINT"),
    ("rows_deleted", "BIGINT"),
    ("rows_rejected", "BIGINT"),
    ("loaded_at", "TIMESTAMP NOT NULL"),
    ("method", "TEXT"),
    ("execution_time", "TIMESTAMP"),
)
#: Columns later versions added, each nullable: a ledger created before them gets them added.
ADDED_COLUMNS: tuple[tuple[str, str], ...] = (("execution_time", "TIMESTAMP"),)
#: How many of the newer executions a load names in its summary and its warning.
NEWER_SHOWN = 5


@dataclass(frozen=True)
class LedgerEntry:
    target_table: str
    execution_id: str | None
    export_type: str
    sha256: str
    source: str
    bytes: int
    rows_loaded: int
    rows_deleted: int
    rows_rejected: int
    loaded_at: object
    method: str
    #: When the execution completed (its ``updateTime``, naive UTC); ``None`` when unknown.
    execution_time: object = None

    def values(self) -> tuple[object, ...]:
        return (
            self.target_table,
            self.execution_id,
            self.export_type,
            self.sha256,
            self.source,
            self.bytes,
            self.rows_loaded,
            self.rows_deleted,
            self.rows_rejected,
            self.loaded_at,
            self.method,
            self.execution_time,
        )


def _column(d: Dialect, name: str, sql_type: str) -> str:
    """``name TYPE [constraints]``, the type spelled by the dialect."""
    kind, _, constraints = sql_type.partition(" ")
    return " ".join(part for part in (name, d.type_sql(kind), constraints) if part)


def create_sql(d: Dialect, ledger: TableName) -> str:
    columns = ", ".join(_column(d, name, sql_type) for name, sql_type in LEDGER_COLUMNS)
    return f"CREATE TABLE IF NOT EXISTS {d.table_sql(ledger)} ({columns})"


def insert_sql(d: Dialect, ledger: TableName) -> str:
    names = ", ".join(name for name, _ in LEDGER_COLUMNS)
    marks = ", ".join(d.placeholder for _ in LEDGER_COLUMNS)
    return f"INSERT INTO {d.table_sql(ledger)} ({names}) VALUES ({marks})"


def find_sql(d: Dialect, ledger: TableName) -> str:
    """Earlier loads of this file into this table; ``execution_id`` compared NULL-safely."""
    p = d.placeholder
    return (
        f"SELECT loaded_at, rows_loaded, sha256 FROM {d.table_sql(ledger)} WHERE target_table = {p} "
        f"AND sha256 = {p} AND (execution_id = {p} OR (execution_id IS NULL AND {d.text_param()} IS NULL)) "
        "ORDER BY loaded_at DESC"
    )


def find_execution_sql(d: Dialect, ledger: TableName) -> str:
    """Earlier loads of this execution into this table, whatever the file's digest.

    For a load that is still downloading, whose digest is not known yet: an execution's file does not
    change once it is complete, so its id alone says whether it is in the table.
    """
    p = d.placeholder
    return (
        f"SELECT loaded_at, rows_loaded, sha256 FROM {d.table_sql(ledger)} WHERE target_table = {p} "
        f"AND execution_id = {p} ORDER BY loaded_at DESC"
    )


def loaded_ids_sql(d: Dialect, ledger: TableName) -> str:
    """The ids of the executions loaded into a table (parameter: the table)."""
    return (
        f"SELECT DISTINCT execution_id FROM {d.table_sql(ledger)} WHERE target_table = {d.placeholder} "
        "AND execution_id IS NOT NULL"
    )


def missing_columns(existing: Sequence[str]) -> list[tuple[str, str]]:
    """The columns (name, type) an older ledger with ``existing`` columns lacks."""
    have = {name.lower() for name in existing}
    return [(name, sql_type) for name, sql_type in ADDED_COLUMNS if name not in have]


def add_column_sql(d: Dialect, ledger: TableName, name: str, sql_type: str) -> str:
    """Add a column to an older ledger; ``IF NOT EXISTS`` where the dialect has it, so a load into
    another table that migrated the same ledger meanwhile is no error."""
    guard = "IF NOT EXISTS " if d.capabilities.add_column_if_not_exists else ""
    return f"ALTER TABLE {d.table_sql(ledger)} ADD COLUMN {guard}{_column(d, name, sql_type)}"


def _latest_sql(d: Dialect, ledger: TableName) -> str:
    """Each execution's newest ledger row for one table (parameter: the table)."""
    return (
        "SELECT execution_id, execution_time, ROW_NUMBER() OVER "
        "(PARTITION BY execution_id ORDER BY loaded_at DESC) AS _n "
        f"FROM {d.table_sql(ledger)} WHERE target_table = {d.placeholder} AND execution_id IS NOT NULL"
    )


def _newer_where(d: Dialect) -> str:
    """Parameters: the loading execution's time, then its id twice (compared NULL-safely)."""
    p = d.placeholder
    return f"_n = 1 AND execution_time > {p} AND ({d.text_param()} IS NULL OR execution_id <> {p})"


def newer_sql(d: Dialect, ledger: TableName) -> str:
    """The newest execution in a table newer than the loading one: one row at most, usually none.

    Parameters: table, execution time, execution id, execution id. A row without a time is never
    newer, so loads that pass no times keep replacing what they restate.
    """
    return (
        f"SELECT execution_id, execution_time FROM ({_latest_sql(d, ledger)}) w "
        f"WHERE {_newer_where(d)} ORDER BY execution_time DESC LIMIT 1"
    )


def newer_ids_sql(d: Dialect, ledger: TableName) -> str:
    """A subquery of the ids of every execution in a table newer than the loading one.

    Same parameters as :func:`newer_sql`; the ids are never NULL, so ``NOT IN`` it is safe.
    """
    return f"SELECT execution_id FROM ({_latest_sql(d, ledger)}) w WHERE {_newer_where(d)}"


def newer_params(table: str, execution_time: object, execution_id: str | None) -> list[object]:
    """The parameters of :func:`newer_sql` and :func:`newer_ids_sql`, in order."""
    return [table, execution_time, execution_id, execution_id]
