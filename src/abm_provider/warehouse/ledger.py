"""The load ledger: one row per committed load, written in the same transaction as the data.

Because the ledger row commits or rolls back with the rows it describes, "this execution and this
file are in the table" is exactly "the ledger has a row for them", which is what makes a re-run of
the same execution a safe no-op. The ledger lives in the target's schema so that it travels with
the data it describes (same backups, same grants).
"""

from __future__ import annotations

from dataclasses import dataclass

from abm_provider.warehouse.schema import TableName

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
)


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
        )


def create_sql(ledger: TableName) -> str:
    columns = ", ".join(f"{name} {sql_type}" for name, sql_type in LEDGER_COLUMNS)
    return f"CREATE TABLE IF NOT EXISTS {ledger.sql} ({columns})"


def insert_sql(ledger: TableName, placeholder: str) -> str:
    names = ", ".join(name for name, _ in LEDGER_COLUMNS)
    marks = ", ".join(placeholder for _ in LEDGER_COLUMNS)
    return f"INSERT INTO {ledger.sql} ({names}) VALUES ({marks})"


def find_sql(ledger: TableName, placeholder: str) -> str:
    """Earlier loads of this file into this table; ``execution_id`` compared NULL-safely."""
    p = placeholder
    return (
        f"SELECT loaded_at, rows_loaded, sha256 FROM {ledger.sql} WHERE target_table = {p} AND sha256 = {p} "
        f"AND (execution_id = {p} OR (execution_id IS NULL AND CAST({p} AS TEXT) IS NULL)) "
        "ORDER BY loaded_at DESC"
    )


def find_execution_sql(ledger: TableName, placeholder: str) -> str:
    """Earlier loads of this execution into this table, whatever the file's digest.

    For a load that is still downloading, whose digest is not known yet: an execution's file does not
    change once it is complete, so its id alone says whether it is in the table.
    """
    p = placeholder
    return (
        f"SELECT loaded_at, rows_loaded, sha256 FROM {ledger.sql} WHERE target_table = {p} "
        f"AND execution_id = {p} ORDER BY loaded_at DESC"
    )
