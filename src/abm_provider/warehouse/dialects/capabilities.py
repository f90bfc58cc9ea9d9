"""What a warehouse can do, declared once per dialect as data, the way dlt's destinations declare theirs.

The load flow and the list sync read a dialect's :class:`Capabilities` instead of probing its
methods, and nothing has a default: a dialect states each one, so a new warehouse cannot inherit a
lock it does not have or a join it cannot run. The registry
(:mod:`abm_provider.warehouse.dialects`) refuses a dialect class that declares no record of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

#: What keeps two loads of one table from interleaving: the database, for every session
#: (``"sessions"``); this process alone (``"process"``: where one process writes the database, as
#: with a DuckDB file, that is every writer); or nothing (``"none"``: the loader says so in its log).
TableLock = Literal["sessions", "process", "none"]


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """One warehouse's capabilities. Every field is required."""

    #: Short name of the bulk path, reported in logs, XCom and the ledger (``postgres_copy``...).
    bulk_path: str
    #: What serialises the loads of one table (:data:`TableLock`).
    table_lock: TableLock
    #: A named lock a session keeps across its transactions (the list sync's one run per list).
    session_locks: bool
    #: Whether the database names a session lock's holder (its run id), so no lock table of this
    #: process has to.
    names_lock_holder: bool
    #: Whether a table that does not exist yet is first filled in one pass (``Dialect.load_direct``).
    direct_new_table: bool
    #: Readers of a file still downloading that the bulk path takes; 0: it reads the file once there.
    stream_readers: int
    #: Whether a new table gets a unique index on its natural key.
    unique_key_index: bool
    #: Whether ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` is understood.
    add_column_if_not_exists: bool
    #: Whether the list sync's rules run in SQL (``Dialect.matches_sql``, ``md5_sql``), so a source on
    #: the state connection is planned in the warehouse.
    rules_in_sql: bool
    #: Whether ``FULL OUTER JOIN`` is understood: the list sync compares a source with a list's
    #: members in one pass where it is, and stages the whole source where it is not.
    full_outer_join: bool

    def described(self) -> dict[str, object]:
        """The record as ``{field: value}``, in declaration order (for logs and the docs' table)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}
