"""What a warehouse declares once: its SQL spelling, its transactions and locks, and its bulk path.

The load flow (:mod:`abm_provider.warehouse.flow`) is the same for every warehouse; everything that
differs between them is a method or a class attribute of a :class:`Dialect`, so adding a warehouse is
one file in this folder and one line in the registry (:mod:`abm_provider.warehouse.dialects`). The
list sync's state tables and lineage can ask the same object (quoting, placeholder, statistics, the
streaming cursor), so no other module needs to branch on a warehouse's name.

A dialect holds what does not change from one load to the next (its hook, its options), never a
load's state: one instance can serve two loads at once. Its steps return values (:class:`Staged`, the
lock :meth:`Dialect.lock` took) that the flow keeps for the load, rather than leaving state in the
dialect for the flow to find.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from abm_provider.warehouse.dialects.capabilities import POSITIONAL_MARKERS, Capabilities
from abm_provider.warehouse.schema import STANDARD_QUOTE, Kind, TableName, quote

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest
    from abm_provider.warehouse.stream import IncomingFile


class ProcessLock(Protocol):
    """A lock of this process a load holds (:meth:`Dialect.lock`), released when its transaction ends."""

    def release(self) -> None: ...


def lock_number(key: str) -> int:
    """A signed 64-bit number for a lock's key (PostgreSQL's advisory locks), stable across processes."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


@dataclass(frozen=True)
class Staged:
    """What staging the file told the flow.

    ``rejects``: records that could not be staged (malformed), by record number, with the reason.
    ``order_column``: the stage's column that increases with the record number, and
    ``first_record``: what to add to it to get the record number. ``rules_checked``: no staged row
    breaks a column rule (checked before or while staging), so the stage need not be asked.
    ``keys_unique``: no natural key repeats in the file (proven while staging).
    """

    rejects: Mapping[int, str] = field(default_factory=dict)
    order_column: str = "_rec"
    first_record: int = 0
    rules_checked: bool = False
    keys_unique: bool = False
    #: The days the valid rows are about, when staging learned them (else the flow asks the stage).
    days: tuple[str, ...] | None = None

    def record_numbers(self, ids: list[int]) -> list[int]:
        """The record numbers of the file behind these values of ``order_column``."""
        return [i + self.first_record for i in ids]


@dataclass(frozen=True)
class NewTable:
    """A one-pass load into a table just created: the load, its column plan, its time and its file."""

    request: LoadRequest
    plan: ColumnPlan
    loaded_at: dt.datetime
    incoming: IncomingFile


@dataclass(frozen=True)
class Filled:
    """What a one-pass load wrote: ``rows``, and ``keys_unique`` when no natural key repeats (proven)."""

    rows: int
    keys_unique: bool = False
    #: The days the rows are about, when the fill learned them (else the flow asks the table).
    days: tuple[str, ...] | None = None


class Dialect(ABC):
    """One warehouse's SQL and bulk path, for one load through ``hook`` (a common-sql ``DbApiHook``)."""

    #: The registry's name for it, and what :func:`abm_provider.warehouse.dialect_of` answers.
    name: ClassVar[str]
    #: What the warehouse can do; each dialect class declares its own, whole (the registry checks).
    capabilities: ClassVar[Capabilities]
    #: The frozen dataclass of the warehouse's own settings (:mod:`.options`; ``NoOptions`` where it
    #: has none); each dialect class declares its own (the registry checks).
    options_type: ClassVar[type[Any]]
    #: The driver's positional parameter marker (``?``, ``%s``), which the loader's statements bind
    #: with: set when the dialect is made, as :meth:`positional_marker` reads the declared style.
    placeholder: str
    #: How an identifier is quoted (``{}`` is the name, already checked to be a plain identifier).
    quote_format: str = STANDARD_QUOTE
    #: SQL for the schema a table name without one resolves to.
    current_schema_sql: ClassVar[str] = "current_schema()"
    #: A condition (ending in ``AND``) that keeps information_schema to the connection's database.
    catalog_where: ClassVar[str] = ""
    #: The schema an unqualified table is in, for lineage, where common-sql's answer would be wrong.
    lineage_schema: ClassVar[str | None] = None

    def lineage_namespace(self) -> str | None:
        """The OpenLineage namespace of the database, when the hook's own database info has none."""
        return None

    def __init__(
        self,
        hook: Any,
        options: object | None = None,
        *,
        chunk_rows: int = 10_000,
        log: logging.Logger | None = None,
    ) -> None:
        """``options``: an ``options_type`` (:func:`~abm_provider.warehouse.dialects.dialect_for` reads
        it from the connection and the task), its defaults when ``None``. ``chunk_rows``: rows per
        ``executemany`` where rows are bound from Python."""
        self.hook = hook
        self.options: object = self.options_type() if options is None else options
        if not isinstance(self.options, self.options_type):
            raise TypeError(f"options of the {self.name} dialect must be {self.options_type.__qualname__}")
        self.chunk_rows = chunk_rows
        self.log = log or logging.getLogger(__name__)
        self.placeholder = self.positional_marker()

    def positional_marker(self) -> str:
        """The marker of the positional style the capabilities declare (``param_style``); for
        ``"hook"``, the hook's ``placeholder`` (``%s`` without one), read once: common-sql reads it from
        the connection each time.

        A dialect whose driver takes values by name (``named``, ``pyformat``) defines this itself,
        if its driver also takes a positional marker; the registry refuses one that does not.
        """
        style = self.capabilities.param_style
        if style == "hook":
            return getattr(self.hook, "placeholder", None) or POSITIONAL_MARKERS["format"]
        marker = POSITIONAL_MARKERS.get(style)
        if marker is None:
            raise TypeError(
                f"the {self.name} dialect declares param_style={style!r}, which has no positional marker: "
                "it must define positional_marker"
            )
        return marker

    @property
    def conn_id(self) -> str | None:
        """The Airflow connection id the hook was made for."""
        conn_id = getattr(self.hook, str(getattr(self.hook, "conn_name_attr", "")), None)
        return None if conn_id is None else str(conn_id)

    # ---- spelling ------------------------------------------------------------------------------

    def quote(self, name: str) -> str:
        """An identifier already checked by :func:`~abm_provider.warehouse.schema.check_identifier`."""
        return quote(name, self.quote_format)

    def table_sql(self, table: TableName) -> str:
        """The table's name as SQL, schema-qualified when it has a schema."""
        name = self.quote(table.name)
        return f"{self.quote(table.schema)}.{name}" if table.schema else name

    def type_sql(self, sql_type: str) -> str:
        """The dialect's spelling of a standard SQL type (``TEXT``, ``TIMESTAMP``...) of a column."""
        return sql_type

    def text_sql(self, length: int | None = None) -> str:
        """A text column compared exactly (case and accents): ``VARCHAR(length)``, or ``TEXT``."""
        return f"VARCHAR({length})" if length else "TEXT"

    def column_type(self, kind: Kind) -> str:
        """The SQL type of a column of this kind in the target table."""
        return self.type_sql(kind.sql_type)

    def typed(self, column: str, kind: Kind) -> str:
        """SQL turning a staged (text) column into the table's type."""
        return f"CAST({column} AS {self.column_type(kind)})"

    def repeated_key_sql(self, table_sql: str, keys: Sequence[str]) -> str:
        """One row when some natural key occurs twice in ``table_sql``, else none."""
        key_sql = ", ".join(self.quote(k) for k in keys)
        return f"SELECT 1 FROM {table_sql} GROUP BY {key_sql} HAVING COUNT(*) > 1 LIMIT 1"

    def growing_key_sql(self, columns: Sequence[str]) -> str:
        """What the column list of a table that grows with the data ends with to key it by ``columns``.

        A primary key here; a dialect where a key costs more than it guards may leave it out.
        """
        return f", PRIMARY KEY ({', '.join(columns)})"

    def key_index_sql(self, columns: Sequence[str]) -> str:
        """What a ``CREATE TABLE`` column list ends with so lookups by ``columns`` use an index (``, ...``).

        Empty here: the planners that join by hashing need none, and it would cost the bulk write.
        """
        return ""

    def embeddable(self, text: str) -> bool:
        """Whether ``text`` (a name, a query) can be written into a statement that binds parameters.

        A format-style driver (``%s``: psycopg, mysqlclient) reads every ``%`` of such a statement as
        a marker, whatever quotes or comments it is in; drivers with other markers parse the SQL.
        """
        return not self.placeholder.startswith("%") or "%" not in text

    def param(self, sql_type: str) -> str:
        """A parameter marker typed as ``sql_type`` (some servers cannot infer a bare marker's type)."""
        return f"CAST({self.placeholder} AS {sql_type})"

    def cast_sql(self, expression: str, sql_type: str) -> str:
        """``expression`` as a value of the standard type ``sql_type`` (``TEXT``, ``BIGINT``), in an
        expression rather than a column (some databases spell a cast's target otherwise)."""
        return f"CAST({expression} AS {sql_type})"

    def text_param(self) -> str:
        """A parameter marker typed as text, for NULL-safe comparisons of a bound value.

        Typed even where ``param`` is bare: a server that binds on its side cannot type ``? IS NULL``.
        """
        return self.cast_sql(self.placeholder, "TEXT")

    def strip_sql(self, expression: str) -> str:
        """``expression`` (text) without the whitespace around it, as Python's ``str.strip()`` takes it
        off (:mod:`~abm_provider.warehouse.dialects.stripping`): how the account validator reads an id
        or an org, so a key worked out in SQL is the key the lists record. Here standard SQL's
        ``TRIM``, spaces only, where a dialect knows no better."""
        return f"TRIM({expression})"

    def char_length_sql(self, expression: str) -> str:
        """How many characters (not bytes) text ``expression`` holds, as a column's declared length
        counts them: a value longer than a key column is left out rather than refused by the insert."""
        return f"LENGTH({expression})"

    def exact_sql(self, expression: str) -> str:
        """``expression`` compared exactly, character for character, whatever its column's collation.

        The text itself here: these databases compare text exactly unless told otherwise.
        """
        return expression

    def adapt(self, conn: Any, value: Any) -> Any:
        """Turn a Python value into one the driver of ``conn`` (a connection, or a cursor of one) binds."""
        return value

    def rowcount(self, cur: Any) -> int:
        return int(cur.rowcount)

    # ---- connection, transactions and locks ----------------------------------------------------

    def connect(self) -> Any:
        return self.hook.get_conn()

    def cursor(self, conn: Any) -> Any:
        return conn.cursor()

    def streaming_cursor(self, conn: Any) -> Any:
        """A cursor that leaves a large result on the server and fetches it in pieces, where it can."""
        return conn.cursor()

    def begin(self, cur: Any) -> None:  # noqa: B027 - optional, most drivers open a transaction implicitly
        """Start the load's transaction."""

    def begin_transaction(self, cur: Any) -> None:  # noqa: B027 - most drivers open one implicitly
        """Open a transaction where the driver would otherwise commit each statement by itself."""

    def begin_replace(self, conn: Any, cur: Any) -> None:  # noqa: B027 - optional
        """Called after staging and the lock: a dialect that staged outside the transaction opens it."""

    def lock(self, cur: Any, table: TableName) -> ProcessLock | None:
        """Serialise loads into ``table`` until the transaction ends, as ``capabilities.table_lock``
        declares; a dialect that declares ``"none"`` takes nothing, and the loader logs that it does not.

        Called before :meth:`begin_replace`. A lock of the database ends with the transaction by itself
        (``None``); a lock of this process (``"process"``) is returned, and the caller releases it once
        the transaction has ended.
        """
        return None

    def rollback(self, conn: Any) -> None:
        try:
            conn.rollback()
        except Exception:  # the connection may already be gone (killed server, closed socket)
            self.log.debug("rollback failed", exc_info=True)

    def close(self, conn: Any) -> None:
        try:
            conn.close()
        except Exception:
            self.log.debug("close failed", exc_info=True)

    def create_key_index(self, cur: Any, statement: str) -> None:
        """Run ``statement``, the unique natural-key index of a table this load created."""
        cur.execute(statement)

    def analyze(self, cur: Any, table_sql: str) -> None:  # noqa: B027 - optional
        """Refresh the planner's statistics of a table just filled (where the planner needs them)."""

    def insert_rows(
        self, cur: Any, table_sql: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Append rows held in Python to a table by the dialect's bulk path (``executemany`` here)."""
        marks = ", ".join(self.placeholder for _ in columns)
        cur.executemany(
            f"INSERT INTO {table_sql} ({', '.join(columns)}) VALUES ({marks})", [list(r) for r in rows]
        )

    # ---- a session's named lock (the list sync's state database) --------------------------------
    # Where ``capabilities.session_locks`` is true, ``try_session_lock`` takes a lock the session
    # keeps across its transactions; where ``names_lock_holder`` is, ``session_lock_holder`` knows its run.

    def identity(self, conn: Any) -> str:
        """The database this connection writes, for locks kept in the process instead of the database."""
        return f"{self.name}:{type(self.hook).__name__}:{self.conn_id}"

    def file_locked(self, err: BaseException) -> tuple[str, int | None] | None:
        """``(path, pid)`` when connecting failed because another process has the database file open."""
        return None

    def creation_lock(self, cur: Any, key: str) -> None:  # noqa: B027 - optional
        """Serialise creating tables under ``key`` until the transaction ends, across sessions."""

    def try_session_lock(self, cur: Any, key: str, label: str) -> bool:
        """Take the session's lock ``key`` without waiting (its holder called ``label`` where it can be).

        ``False``: another session has it. A database without session locks has nothing more to take
        (the state database's in-process lock is the only one there), so the lock is taken.
        """
        return True

    def session_lock_holder(
        self, cur: Any, key: str
    ) -> tuple[str | None, dt.datetime | None, int | None] | None:
        """``(label, since, server process id)`` of the session holding ``key``; ``None`` if none does."""
        return None

    def release_session_lock(self, cur: Any, key: str) -> None:  # noqa: B027 - optional
        """Give back the session's lock ``key``."""

    # ---- rules in SQL (the loader's column rules, the list sync's planning) -----------------------
    #: ``str()`` of the DB-API type codes of text columns, whose values reach Python as ``str``. Empty:
    #: the list sync validates every source row in Python on this database.
    text_type_codes: ClassVar[frozenset[str]] = frozenset()

    def numbered_sql(self, query: str, record: str) -> str:
        """The rows of ``query`` (one SELECT statement), numbered from 1 in the order the query gives
        them, in the column ``record``, first."""
        return f"SELECT ROW_NUMBER() OVER () AS {record}, q.* FROM (\n{query}\n) q"

    def numbered_copy_sql(self, table: str, query: str, record: str) -> str:
        """Create ``table`` of :meth:`numbered_sql`'s rows (temporary where ``capabilities.temporary_tables``
        says the warehouse has such tables); ``query`` is as a user wrote it."""
        kind = "TEMPORARY TABLE" if self.capabilities.temporary_tables else "TABLE"
        return f"CREATE {kind} {table} AS {self.numbered_sql(query, record)}"

    def described_columns(self, cur: Any, relation: str) -> list[tuple[str, bool]]:
        """The columns of ``relation`` (a table, or a query in parentheses) in order, each with whether
        its values reach Python as text (:attr:`text_type_codes`)."""
        cur.execute(f"SELECT * FROM {relation} n WHERE 1 = 0")
        return [(str(d[0]), str(d[1]) in self.text_type_codes) for d in cur.description]

    def matches_sql(self, column: str, pattern: str) -> str | None:
        """A condition true when ``column`` matches the regular expression ``pattern`` as a whole.

        ``None`` where the database has no regular expressions the rules can rely on; the callers
        then check in Python. ``pattern`` is a trusted constant (no quote in it).
        """
        return None

    @property
    def has_rules_in_sql(self) -> bool:
        """Whether the rules run in the database here (:attr:`Capabilities.rules_in_sql`)."""
        return self.capabilities.rules_in_sql

    def md5_sql(self, parts: Sequence[str]) -> str:
        """The hex MD5 of text expressions (none ``NULL``) joined by the unit separator ``chr(31)``.

        Equal to :func:`hashlib.md5` of the same values joined by ``"\x1f"`` and encoded as UTF-8.
        """
        return f"md5({' || chr(31) || '.join(parts)})"

    # ---- catalog and bulk path -----------------------------------------------------------------

    def table_columns(self, conn: Any, cur: Any, table: TableName) -> list[str] | None:
        """The table's column names in order, or ``None`` when it does not exist (information_schema)."""
        cur.execute(
            f"SELECT column_name FROM information_schema.columns WHERE {self.catalog_where}"
            f"table_schema = COALESCE({self.text_param()}, {self.current_schema_sql}) "
            f"AND table_name = {self.placeholder} ORDER BY ordinal_position",
            [table.schema, table.name],
        )
        names = [str(r[0]) for r in cur.fetchall()]
        return names or None

    @abstractmethod
    def stage(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str, incoming: IncomingFile
    ) -> Staged:
        """Create and fill the stage table (:data:`~abm_provider.warehouse.schema.STAGE_TABLE`).

        It has the header's columns and a ``_reason`` column, set (by ``reason_sql`` where the dialect
        checks rules in SQL) for each row that breaks a column rule.
        """

    def load_direct(
        self,
        cur: Any,
        request: LoadRequest,
        plan: ColumnPlan,
        loaded_at: dt.datetime,
        incoming: IncomingFile,
    ) -> Filled | None:
        """Fill the new, empty target straight from the file; what it wrote, or ``None`` to fall back.

        Why: staging writes every row twice (stage, then table), which for a first load or a
        backfill is most of the time. Called under the lock, in the transaction that has just
        created the table; ``None`` (the file has a record to reject, a key it repeats, or cannot
        be read in one pass) makes the caller roll all of it back and run the staged flow. The
        dialect fills the table (:meth:`fill_new_table`); a repeated key is looked for here.
        """
        filled = self.fill_new_table(cur, NewTable(request, plan, loaded_at, incoming))
        if filled is None:
            return None
        if not filled.keys_unique:
            cur.execute(self.repeated_key_sql(self.table_sql(request.table), request.key_columns))
            if cur.fetchone() is not None:
                self.log.info("%s repeats a natural key; staging it to set rows aside", request.path.name)
                return None
        return filled

    def fill_new_table(self, cur: Any, new: NewTable) -> Filled | None:
        """Write every record of the file into the new table in one pass, each row checked by the rules.

        ``None`` when a record breaks a rule or the file cannot be read in one pass (say why in the
        log). Only called where ``capabilities.direct_new_table`` is true.
        """
        return None
