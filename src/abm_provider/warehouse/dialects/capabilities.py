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
#: PEP 249's parameter styles a statement binds its values in: ``qmark`` (``?``), ``format`` (``%s``),
#: ``named`` (``:name``) and ``pyformat`` (``%(name)s``).
ParamStyle = Literal["qmark", "format", "named", "pyformat"]
#: The marker of each positional style, as a DB-API driver and common-sql's ``placeholder`` write it.
#: A dialect's ``placeholder`` is its style's marker here; the loader's statements bind with it.
POSITIONAL_MARKERS: dict[ParamStyle, str] = {"qmark": "?", "format": "%s"}


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
    #: How the driver takes bound values (:data:`ParamStyle`), or ``"hook"``: as the common-sql hook's
    #: ``placeholder`` says (``?`` or ``%s``), for a dialect that serves any driver. The list sync binds
    #: its statements in it.
    param_style: ParamStyle | Literal["hook"]
    #: Whether ``CREATE TEMPORARY TABLE`` makes a table of the session's own, dropped with it. Where it
    #: does not, the list sync's work tables (the staged source and what is planned from it) are
    #: ordinary tables of unique names beside the state tables, dropped when the plan is written.
    temporary_tables: bool
    #: Whether several statements commit or roll back together. The list sync writes a plan with its
    #: run's row, and each answered group with the run's progress, in one transaction, and refuses a
    #: state database without them rather than leave a half-written plan after a crash.
    multi_statement_transactions: bool
    #: Whether ``DELETE t FROM t JOIN s ON ...`` is understood, and the better form: the list sync
    #: deletes members by a join with the plan there, and with ``EXISTS`` elsewhere.
    delete_using_join: bool
    #: Whether ``CREATE TABLE`` and ``ALTER TABLE`` roll back with the transaction they ran in. Where
    #: they do not (MySQL, Snowflake, BigQuery), DDL commits what came before it, and with it a lock
    #: the transaction held: the load takes its lock again after creating or widening a table, and
    #: asks the ledger again.
    transactional_ddl: bool
    #: Whether a row written in a transaction keeps a second writer of its table out until the commit:
    #: the other transaction waits (Snowflake, PostgreSQL, MySQL) or is aborted (BigQuery, DuckDB).
    #: Where the database has no session lock and more than one process writes it, the list sync's
    #: one run per list is then a row of its ``<prefix>locks`` table.
    lock_rows: bool
    #: Whether ``Dialect.strip_sql`` takes off what Python's ``str.strip()`` does (tabs, line breaks,
    #: Unicode's spaces), not only spaces: the audience sync's keys worked out in SQL are then the keys
    #: the validator gives, so it trusts its own grouping of them.
    strips_like_python: bool

    def described(self) -> dict[str, object]:
        """The record as ``{field: value}``, in declaration order (for logs and the docs' table)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}
