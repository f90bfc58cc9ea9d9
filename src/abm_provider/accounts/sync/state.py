"""The list sync's state tables in the warehouse: their names, columns and ``CREATE TABLE`` statements.

Five tables, created on first use, shared by every list the sync keeps (each row carries its list):

- ``<prefix>members``: what each list holds by our record, one row per ``(account_id, crm_org_id)``
  membership key. ``crm_org_id`` is ``''`` when the row gave none (the service then uses the
  customer's CRM org), so keys compare with ``=`` on every database.
- ``<prefix>plan``: each run's change set, numbered per action, so a retry resumes after the last
  batch recorded instead of sending it all again. A list keeps only its latest runs' plans.
- ``<prefix>rejects``: rows refused (invalid before sending, refused by the service with ``400``, or
  not found by it), with the reason and a hash of the values; a row with the same hash is skipped,
  not sent again (the runs table counts the rows skipped so in its ``held`` column), except an
  account not found, which is sent again once ``retry_not_found_after`` has passed.
- ``<prefix>runs``: one row per list and run: mode, status, the plan's counts, how far each action
  got, and what the service answered.
- ``<prefix>log``: the run log, one row per account a run acted on or skipped: its action and
  outcome (:data:`OUTCOMES`) with the reason, kept ``log_retention_days``.

The statements that read and write them are :mod:`~abm_provider.accounts.sync.statements`'. Every
value is passed as a bind parameter; only the identifiers, checked as plain names, are spliced into the
SQL text.

A sync holds a lock per list while it runs (see :meth:`StateTables.lock_key`), so two syncs of one
list never plan or record over each other. Where the database has no lock a session keeps across its
transactions (Snowflake, BigQuery), that lock is a row of a sixth table, ``<prefix>locks``
(:func:`uses_lock_rows`), created with the others there only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from abm_provider.warehouse.schema import TableName, check_identifier

if TYPE_CHECKING:
    from abm_provider.warehouse.dialects import Dialect

#: The default name prefix of the state tables.
DEFAULT_PREFIX = "abm_sync_"
#: The longest account id, org, type or name the state tables hold, in characters: as long as the
#: service takes. A longer id is no account of any list, and the work tables that key accounts leave
#: it out.
KEY_LENGTH = 255

#: Status of a run whose plan is written and not yet fully sent.
SENDING = "sending"
#: Status of a run whose plan was sent and recorded.
DONE = "done"
#: Status of a preview: the plan is written, nothing was sent and the membership is unchanged.
DRY_RUN = "dry_run"
#: Status of a run a guard stopped: the plan is kept to be read, nothing was sent or recorded.
BLOCKED = "blocked"
#: What the run log says happened to an account: sent and answered (``added``, ``removed``,
#: ``duplicate`` when the list already was as asked, ``not_found``), refused (``invalid``, by our
#: checks or by the service's ``400``), skipped as refused before with the same values (``held``), or
#: held back to wait for a later run (``waiting``: an audience sync's addition of an account the
#: service refused to remove from another of the programme's lists).
WAITING_OUTCOME = "waiting"
OUTCOMES: tuple[str, ...] = ("added", "removed", "duplicate", "not_found", "invalid", "held", WAITING_OUTCOME)
#: The run log's columns, in the order its rows are written.
LOG_COLUMNS: tuple[str, ...] = (
    "list_id",
    "run_id",
    "action",
    "outcome",
    "account_id",
    "crm_org_id",
    "reason",
    "record",
    "logged_at",
)
#: The rejects table's columns, in order.
REJECTS_COLUMNS: tuple[str, ...] = (
    "list_id",
    "run_id",
    "action",
    "account_id",
    "crm_org_id",
    "row_hash",
    "reason",
    "record",
    "line",
    "raw",
    "recorded_at",
)
#: The rejects table's ``action`` of each kind of reject: an account the service did not find (the
#: add it answered; sent again once ``retry_not_found_after`` has passed), an account the service
#: refused with ``400``, and a row our checks refused before sending.
NOT_FOUND_ACTION = "add"
REFUSED_ACTION = "refused"
INVALID_ACTION = "invalid"
#: The runs table's count columns, in order.
RUN_COUNTS = (
    "source_rows",
    "to_add",
    "to_remove",
    "add_done",
    "remove_done",
    "added",
    "removed",
    "duplicates",
    "not_found",
    "rejected",
    "held",
)


def uses_lock_rows(dialect: Dialect) -> bool:
    """Whether the sync's lock on this database is a row of ``<prefix>locks``: it has no session lock,
    more than one process writes it, and a row written in a transaction keeps a second writer out."""
    caps = dialect.capabilities
    return caps.lock_rows and not caps.session_locks and caps.table_lock != "process"


def check_run_counts(names: Iterable[str]) -> None:
    """Refuse a name that is not one of the runs table's :data:`RUN_COUNTS`: the statements that write
    counts by name put the names into their SQL text."""
    unknown = sorted(set(names) - set(RUN_COUNTS))
    if unknown:
        raise ValueError(f"the runs table counts {list(RUN_COUNTS)}, not {unknown}")


def utc_now() -> datetime:
    """The time as the state tables keep it: UTC to the second, without a zone.

    The tables' ``TIMESTAMP`` columns have no zone, and PostgreSQL would store a zone-aware value
    in the session's time zone, so every row is written, and read, as UTC.
    """
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


@dataclass(frozen=True)
class TableSql:
    """The five tables' names as one database's SQL (quoted by its dialect)."""

    members: str
    plan: str
    rejects: str
    runs: str
    log: str


@dataclass(frozen=True)
class StateTables:
    """The names of the state tables: ``[schema.]<prefix>{members,plan,rejects,runs,log}``."""

    members: TableName
    plan: TableName
    rejects: TableName
    runs: TableName
    log: TableName

    @classmethod
    def named(cls, prefix: str = DEFAULT_PREFIX, schema: str | None = None) -> StateTables:
        """Tables named ``<prefix>members`` and so on, in ``schema`` (the connection's default if None)."""
        if schema is not None:
            check_identifier(schema, "state_schema")
        check_identifier(prefix + "members", "state_table_prefix")

        def table(name: str) -> TableName:
            return TableName(schema, prefix + name)

        return cls(table("members"), table("plan"), table("rejects"), table("runs"), table("log"))

    def in_sql(self, dialect: Dialect) -> TableSql:
        """The tables' names as ``dialect`` writes them in SQL."""
        tables = (self.members, self.plan, self.rejects, self.runs, self.log)
        return TableSql(*(dialect.table_sql(t) for t in tables))

    @property
    def locks(self) -> TableName:
        """The lock rows' table, ``<prefix>locks``, beside the others (:func:`uses_lock_rows`)."""
        return TableName(self.members.schema, self.members.name.removesuffix("members") + "locks")

    def lock_key(self, list_id: str | None = None) -> str:
        """The name of the lock of one list's sync on these tables, or of creating them (no ``list_id``).

        Stable across processes and releases, so every sync of a list agrees on it: the same list
        kept in tables of another schema or prefix is separate state and gets another lock.
        """
        prefix = self.members.name.removesuffix("members")
        base = f"abm_provider.sync:{self.members.schema or ''}.{prefix}"
        return f"{base}:list:{list_id}" if list_id is not None else f"{base}:tables"

    def create_sql(self, dialect: Dialect) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` for each table, in the dialect's spelling of portable types.

        Keys compare exactly (``text_sql``): account ids differ by case alone.
        """
        key, text = f"{dialect.text_sql(KEY_LENGTH)} NOT NULL", dialect.text_sql(KEY_LENGTH)
        long_text, at = dialect.text_sql(), dialect.type_sql("TIMESTAMP")
        hashed = f"{dialect.text_sql(64)} NOT NULL"
        action = f"{dialect.text_sql(8)} NOT NULL"
        word = f"{dialect.text_sql(16)} NOT NULL"
        account = (
            f"account_id {key}, crm_org_id {key}, crm_type {text}, account_name {text}, row_hash {hashed}"
        )
        counts = ", ".join(f"{c} BIGINT NOT NULL" for c in RUN_COUNTS)
        return [
            f"CREATE TABLE IF NOT EXISTS {dialect.table_sql(self.members)} (list_id {key}, {account}, "
            f"run_id {key}, synced_at {at} NOT NULL"
            f"{dialect.growing_key_sql(['list_id', 'account_id', 'crm_org_id'])})",
            f"CREATE TABLE IF NOT EXISTS {dialect.table_sql(self.plan)} (list_id {key}, run_id {key}, "
            f"action {action}, seq BIGINT NOT NULL, {account}"
            f"{dialect.growing_key_sql(['list_id', 'run_id', 'action', 'seq'])})",
            f"CREATE TABLE IF NOT EXISTS {dialect.table_sql(self.rejects)} (list_id {key}, run_id {key}, "
            f"action {action}, account_id {text}, crm_org_id {text}, row_hash {hashed}, "
            f"reason {long_text} NOT NULL, record BIGINT, line BIGINT, raw {long_text}, "
            f"recorded_at {at} NOT NULL{dialect.key_index_sql(['list_id', 'row_hash'])})",
            f"CREATE TABLE IF NOT EXISTS {dialect.table_sql(self.runs)} (list_id {key}, run_id {key}, "
            f"mode {word}, status {word}, {counts}, started_at {at} NOT NULL, finished_at {at}, "
            "PRIMARY KEY (list_id, run_id))",
            f"CREATE TABLE IF NOT EXISTS {dialect.table_sql(self.log)} (list_id {key}, run_id {key}, "
            f"action {action}, outcome {word}, account_id {text}, crm_org_id {text}, reason {long_text}, "
            f"record BIGINT, logged_at {at} NOT NULL{dialect.key_index_sql(['list_id', 'run_id'])})",
            *(
                [
                    f"CREATE TABLE IF NOT EXISTS {dialect.table_sql(self.locks)} "
                    f"(lock_key {long_text} NOT NULL, run_id {key}, taken_at {at} NOT NULL, "
                    f"heartbeat_at {at} NOT NULL)"
                ]
                if uses_lock_rows(dialect)
                else []
            ),
        ]
