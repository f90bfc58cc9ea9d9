"""A DB-API-like connection to BigQuery whose statements all run in one BigQuery session.

Why a session: BigQuery runs each statement as a job, and a job on its own commits by itself. A
multi-statement transaction spans jobs only inside a session: ``BEGIN TRANSACTION`` in one job and
``COMMIT TRANSACTION`` in a later one are one transaction when both carry the session's id. So the
first job of a :class:`SessionConnection` creates the session (``create_session``) and every later
one names it (the ``session_id`` connection property).

Why not ``google.cloud.bigquery.dbapi``: it binds parameters by name (``%(name)s``), runs no two
statements in one session and gives no affected-row count for DML; what the loader needs is small.
This cursor binds positional ``?`` markers (BigQuery's own positional parameters), types each value
(:func:`query_parameter`: ``None`` as a STRING NULL, which BigQuery coerces where a column or a
``CAST`` says otherwise), and reports DML's affected rows as ``rowcount``.

DDL: BigQuery refuses ``CREATE TABLE``, ``ALTER TABLE`` and ``DROP TABLE`` inside a transaction. A
DDL statement issued while a transaction is open therefore commits it first, runs by itself, and
opens a new transaction after, as MySQL's and Snowflake's implicit commits do: what came before the
DDL is committed, what comes after is one transaction again. The load flow knows
(``Capabilities.transactional_ddl`` is false) and asks the ledger again after its DDL.

Implicit transactions (``implicit_transactions``, what :meth:`BigQueryLoadHook.get_conn` gives, as
PEP 249 wants a connection to start with autocommit off): the first statement that changes a
permanent table opens a transaction, which :meth:`SessionConnection.commit` ends, so a caller that
only knows DB-API (common-sql's ``run``, the generic load path) gets its changes applied together.
Opened there, not at the first statement: a failed statement rolls a BigQuery transaction back
whole, so the probes a portable caller runs first (does this table exist?) must run outside it,
and rows into the session's temporary tables (``CREATE TEMP TABLE``, gone with the session) need
none. Statements BigQuery has no form of (``SAVEPOINT``, ``CREATE INDEX``) are refused here, with no
job, for the same reason: sent inside a transaction, their failure would roll it back.

``executemany`` of ``INSERT ... VALUES (?, ...)`` sends a batch of rows per query job, not a job per
row (see :meth:`SessionCursor.executemany` and BigQuery's limits below).

The client finds its endpoint itself: ``google-cloud-bigquery`` honours ``BIGQUERY_EMULATOR_HOST``,
which is how the tests reach the bqemulator.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

log = logging.getLogger(__name__)

#: A statement that changes a table's definition (never allowed in a BigQuery transaction). A
#: temporary table's DDL is allowed there, so it does not count.
_DDL = re.compile(r"(CREATE|ALTER|DROP)\b(?!(\s+OR\s+REPLACE)?\s+TEMP(ORARY)?\b)", re.IGNORECASE)
_BEGIN = re.compile(r"BEGIN(\s+TRANSACTION)?\s*;?\s*", re.IGNORECASE)
_COMMIT = re.compile(r"COMMIT(\s+TRANSACTION)?\s*;?\s*", re.IGNORECASE)
_ROLLBACK = re.compile(r"ROLLBACK(\s+TRANSACTION)?\s*;?\s*", re.IGNORECASE)
#: Leading whitespace and comments, skipped before a statement's first word is looked at.
_LEADING = re.compile(r"\s*(?:(?:--|#)[^\n]*\n\s*|/\*.*?\*/\s*)*", re.DOTALL)
#: A table name as written: ``t``, ``ds.t``, ```p.ds.t``` or quoted parts.
_NAME = r"(?P<table>(?:`[^`]+`|[\w-]+)(?:\.(?:`[^`]+`|[\w-]+))*)"
#: A statement that changes a table's rows, and the table.
_DML = re.compile(
    rf"(?:INSERT(?:\s+INTO)?|UPDATE|DELETE(?:\s+FROM)?|MERGE(?:\s+INTO)?|TRUNCATE\s+TABLE)\s+{_NAME}",
    re.IGNORECASE,
)
_CREATE_TEMP = re.compile(
    rf"CREATE\s+(?:OR\s+REPLACE\s+)?TEMP(?:ORARY)?\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_NAME}",
    re.IGNORECASE,
)
#: Statements BigQuery has no form of: refused before any job is sent.
_UNSUPPORTED = re.compile(
    r"(SAVEPOINT|RELEASE\s+SAVEPOINT|ROLLBACK\s+TO|CREATE\s+(?:UNIQUE\s+)?INDEX)\b", re.IGNORECASE
)
#: ``INSERT INTO t (a, b) VALUES (?, ?)``: what ``executemany`` sends in batches.
_INSERT_VALUES = re.compile(
    rf"(?P<head>INSERT\s+(?:INTO\s+)?{_NAME}\s*\((?P<columns>[^()]*)\)\s*)VALUES\s*"
    r"\((?P<row>.*)\)\s*;?\s*",
    re.IGNORECASE | re.DOTALL,
)
#: BigQuery's limits on one query job (https://cloud.google.com/bigquery/quotas#query_jobs): 10,000
#: query parameters, and 10 MB for the whole request, query parameters included.
MAX_QUERY_PARAMETERS = 10_000
MAX_REQUEST_BYTES = 10 * 1024 * 1024
#: How much of a request a batch's values may take, estimated as the JSON they are sent as (the
#: rest is left for the query text and the job's settings).
BATCH_BYTES = MAX_REQUEST_BYTES * 3 // 4
#: The JSON around one value in a request, over its text: ``{"f12": {"value": "..."}}, `` and a
#: positional parameter's type (an estimate on the high side).
_VALUE_OVERHEAD = 64
#: Column types a row's values bind as in a batch (``RECORD`` and ``REPEATED`` columns do not).
_SCALAR_TYPES = frozenset(
    {"STRING", "BYTES", "INTEGER", "INT64", "FLOAT", "FLOAT64", "NUMERIC", "BIGNUMERIC", "BOOLEAN", "BOOL",
     "DATE", "DATETIME", "TIME", "TIMESTAMP"}
)  # fmt: skip


class NotSupportedError(Exception):
    """A statement BigQuery has no form of (PEP 249's name): refused without a job."""


def _first_words(sql: str) -> str:
    return sql[_LEADING.match(sql).end() :]  # type: ignore[union-attr]  # the pattern matches any text


def _unquoted(name: str) -> str:
    return name.replace("`", "")


def is_ddl(sql: str) -> bool:
    """Whether ``sql`` creates, alters or drops a table, view or dataset (a temporary table aside)."""
    return _DDL.match(_first_words(sql)) is not None


def query_parameter(value: Any) -> Any:
    """A positional BigQuery query parameter for a Python value.

    ``None`` has no type of its own: it goes as a STRING NULL, which BigQuery coerces to a DATE,
    DATETIME or TIMESTAMP column or ``CAST`` (parameter coercion); a caller that needs another
    type passes a ``ScalarQueryParameter`` itself. A naive ``datetime`` is UTC (the loader's times are)
    and goes as a TIMESTAMP, the type of the loader's time columns here.
    """
    from google.cloud.bigquery import ArrayQueryParameter, ScalarQueryParameter, StructQueryParameter

    if isinstance(value, (ScalarQueryParameter, ArrayQueryParameter, StructQueryParameter)):
        return value
    if value is None:
        return ScalarQueryParameter(None, "STRING", None)
    for python_type, bq_type in _PARAMETER_TYPES:
        if isinstance(value, python_type):
            return ScalarQueryParameter(None, bq_type, value)
    raise TypeError(f"no BigQuery parameter type for {type(value).__name__} value {value!r}")


#: Python types and the BigQuery types they bind as, in order: ``bool`` before ``int`` (a bool is an
#: int), ``datetime`` before ``date`` (likewise).
_PARAMETER_TYPES: tuple[tuple[type[Any], str], ...] = (
    (bool, "BOOL"),
    (int, "INT64"),
    (float, "FLOAT64"),
    (Decimal, "NUMERIC"),
    (str, "STRING"),
    (bytes, "BYTES"),
    (dt.datetime, "TIMESTAMP"),
    (dt.date, "DATE"),
)


class SessionConnection:
    """One BigQuery session, as a DB-API connection: each ``execute`` is a query job in the session.

    Outside a transaction every statement commits by itself. :meth:`begin` opens a transaction,
    :meth:`commit` and :meth:`rollback` end it. ``default_dataset`` (``project.dataset``), when set,
    is where an unqualified table name resolves. Datasets handed to :meth:`drop_at_close` are deleted
    with their tables when the connection closes.
    """

    def __init__(
        self, client: Any, *, location: str | None = None, implicit_transactions: bool = False
    ) -> None:
        self.client = client
        self.location = location
        self.implicit_transactions = implicit_transactions
        self.session_id: str | None = None
        self.default_dataset: str | None = None
        self.in_transaction = False
        #: Names of the temporary tables this session created (as written, without backquotes).
        self.temp_tables: set[str] = set()
        self._scratch: list[str] = []
        self._closed = False

    @property
    def project(self) -> str:
        return str(self.client.project)

    def cursor(self) -> SessionCursor:
        return SessionCursor(self)

    def run(self, sql: str, params: Sequence[Any] | None = None) -> tuple[Any, Any]:
        """Run ``sql`` as a query job in the session, wait for it; the finished job and its rows."""
        from google.cloud import bigquery

        if self._closed:
            raise RuntimeError("the BigQuery connection is closed")
        config = bigquery.QueryJobConfig(query_parameters=[query_parameter(v) for v in params or ()])
        if self.default_dataset:
            config.default_dataset = self.default_dataset
        if self.session_id is None:
            config.create_session = True
        else:
            config.connection_properties = [bigquery.ConnectionProperty("session_id", self.session_id)]
        job = self.client.query(sql, job_config=config, location=self.location)
        rows = job.result()
        if self.session_id is None and job.session_info is not None:
            self.session_id = job.session_info.session_id
        if self.location is None:
            self.location = job.location  # the session's: its later jobs must run there
        return job, rows

    def statement(self, sql: str, params: Sequence[Any] | None = None) -> tuple[Any, Any]:
        """Run one statement that is not ``BEGIN``, ``COMMIT`` or ``ROLLBACK``: DDL inside a transaction
        commits it first and opens a new one after; with ``implicit_transactions``, a change to a
        permanent table opens one. The finished job and its rows."""
        statement = _first_words(sql)
        if _UNSUPPORTED.match(statement):
            raise NotSupportedError(f"BigQuery has no such statement: {statement.split(None, 3)[:3]}")
        reopen = self.in_transaction and is_ddl(sql)
        if reopen:
            self.commit()
        elif self.implicit_transactions and not self.in_transaction and self._changes_a_table(statement):
            self.begin()
        job, rows = self.run(sql, params)
        if reopen:
            self.begin()
        created = _CREATE_TEMP.match(statement)
        if created:
            self.temp_tables.add(_unquoted(created["table"]))
        return job, rows

    def _changes_a_table(self, statement: str) -> bool:
        """Whether ``statement`` changes the rows of a table other than the session's temporary ones."""
        found = _DML.match(statement)
        if found is None:
            return False
        name = _unquoted(found["table"])
        return name not in self.temp_tables and not name.upper().startswith("_SESSION.")

    def begin(self) -> None:
        """Open a transaction, unless one is open."""
        if not self.in_transaction:
            self.run("BEGIN TRANSACTION")
            self.in_transaction = True

    def commit(self) -> None:
        """Commit the open transaction; nothing to do without one (each statement committed itself)."""
        if self.in_transaction:
            self.in_transaction = False
            self.run("COMMIT TRANSACTION")

    def rollback(self) -> None:
        """Roll the open transaction back; nothing to do without one."""
        if self.in_transaction:
            self.in_transaction = False
            self.run("ROLLBACK TRANSACTION")

    def drop_at_close(self, dataset: str) -> None:
        """Delete ``dataset`` (``project.dataset``), tables and all, when the connection closes."""
        self._scratch.append(dataset)

    def close(self) -> None:
        """Roll back what is open, end the session and drop the scratch datasets; each step is tried
        even when one before it failed, as a load that failed may close a broken connection."""
        if self._closed:
            return
        steps = [self.rollback, self._abort_session, *(self._dropper(d) for d in self._scratch)]
        try:
            for step in steps:
                try:
                    step()
                except Exception:
                    log.debug("closing the BigQuery session: a step failed", exc_info=True)
        finally:
            self._closed = True
            self.client.close()

    def _dropper(self, dataset: str) -> Callable[[], None]:
        return lambda: self.client.delete_dataset(dataset, delete_contents=True, not_found_ok=True)

    def _abort_session(self) -> None:
        """End the session now rather than when it expires (a day idle); the emulator cannot."""
        if self.session_id is not None:
            self.run("CALL BQ.ABORT_SESSION()")


def _batches(rows: list[list[Any]], most: int, budget: int) -> Iterator[list[list[Any]]]:
    """``rows`` in order, in batches of at most ``most`` rows and about ``budget`` bytes of values
    (each batch holds one row at least)."""
    batch: list[list[Any]] = []
    size = 0
    for row in rows:
        cost = sum(_VALUE_OVERHEAD + len(str(v)) for v in row)
        if batch and (len(batch) >= most or size + cost > budget):
            yield batch
            batch, size = [], 0
        batch.append(row)
        size += cost
    if batch:
        yield batch


def _struct_array(rows: list[list[Any]], types: list[str]) -> Any:
    """``rows`` as one positional ``ARRAY<STRUCT<f0, f1...>>`` parameter, field ``i`` typed ``types[i]``."""
    from google.cloud.bigquery import ArrayQueryParameter, ScalarQueryParameter, StructQueryParameter

    names = [f"f{i}" for i in range(len(types))]
    structs = [
        StructQueryParameter(
            None, *(ScalarQueryParameter(n, t, v) for n, t, v in zip(names, types, row, strict=True))
        )
        for row in rows
    ]
    return ArrayQueryParameter(None, "STRUCT", structs)


class SessionCursor:
    """A cursor of a :class:`SessionConnection` (``execute``, ``executemany``, ``fetch*``).

    ``BEGIN``, ``COMMIT`` and ``ROLLBACK`` statements go through the connection, which keeps track of
    the transaction; DDL inside a transaction commits it first and opens a new one after (see the
    module's docstring).
    """

    arraysize = 1

    def __init__(self, connection: SessionConnection) -> None:
        self.connection = connection
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1
        self.job: Any = None
        self._rows: Iterator[tuple[Any, ...]] = iter(())
        self._schema: list[Any] = []

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> SessionCursor:
        conn = self.connection
        self.description, self.rowcount, self.job, self._rows, self._schema = None, -1, None, iter(()), []
        statement = _first_words(sql)
        for pattern, action in ((_BEGIN, conn.begin), (_COMMIT, conn.commit), (_ROLLBACK, conn.rollback)):
            if pattern.fullmatch(statement):
                action()
                return self
        self.job, result = conn.statement(sql, params)
        self._read(self.job, result)
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> SessionCursor:
        """Run ``sql`` once per row of ``seq_of_params``; an ``INSERT ... VALUES (?, ...)`` in batches.

        A query job costs about a second on BigQuery, so rows go many to a job: with bare markers
        (``VALUES (?, ?)``), as one ``ARRAY<STRUCT>`` parameter read by ``UNNEST``, its fields typed as
        the table's columns (asked once per call), so a ``None`` is a NULL of the column's type; with
        expressions around the markers, as a ``VALUES`` list of many rows. A batch stays within
        BigQuery's limits on a job: 10,000 query parameters (the list's markers; the array is one)
        and 10 MB for the request (:data:`BATCH_BYTES` of values, estimated). Any other statement
        runs once per row.
        """
        rows = [list(params) for params in seq_of_params]
        insert = _INSERT_VALUES.fullmatch(_first_words(sql))
        marks = insert["row"].count("?") if insert else 0
        if insert is None or not rows or any(len(row) != marks for row in rows):
            return self._each((sql, row) for row in rows)
        columns = [c.strip() for c in insert["columns"].split(",")]
        bare = [m.strip() for m in insert["row"].split(",")] == ["?"] * len(columns)
        types = self._column_types(insert["table"], columns) if bare else None
        if types is None:  # a VALUES list of as many rows as the parameters' limit allows
            row = f"({insert['row']})"
            listed = (
                (f"{insert['head']}VALUES {', '.join([row] * len(batch))}", [v for r in batch for v in r])
                for batch in _batches(rows, MAX_QUERY_PARAMETERS // marks, BATCH_BYTES)
            )
            return self._each(listed)
        fields = ", ".join(f"_row.f{i}" for i in range(len(columns)))
        statement = f"{insert['head']}SELECT {fields} FROM UNNEST(?) AS _row"
        return self._each(
            (statement, [_struct_array(b, types)]) for b in _batches(rows, len(rows), BATCH_BYTES)
        )

    def _each(self, statements: Iterable[tuple[str, list[Any]]]) -> SessionCursor:
        """Run each statement with its parameters; ``rowcount`` is the rows they changed together."""
        total = 0
        for sql, params in statements:
            self.execute(sql, params)
            total += max(self.rowcount, 0)
        self.rowcount = total
        return self

    def _column_types(self, table: str, columns: list[str]) -> list[str] | None:
        """The BigQuery types of ``columns`` of ``table`` (a query that reads no rows), or ``None``
        when one is not a scalar (a ``RECORD``, a ``REPEATED`` column)."""
        self.execute(f"SELECT {', '.join(columns)} FROM {table} LIMIT 0")
        schema = self._schema
        self._rows = iter(())
        if len(schema) != len(columns) or any(
            f.field_type.upper() not in _SCALAR_TYPES or f.mode == "REPEATED" for f in schema
        ):
            return None
        return [str(f.field_type).upper() for f in schema]

    def _read(self, job: Any, result: Any) -> None:
        affected = job.num_dml_affected_rows
        schema = self._schema = list(result.schema or ())
        if schema:
            self.description = [
                (f.name, f.field_type, None, None, f.precision, f.scale, f.mode != "REQUIRED") for f in schema
            ]
            self._rows = (tuple(row.values()) for row in result)
        if affected is not None:
            self.rowcount = int(affected)
        elif schema and result.total_rows is not None:
            self.rowcount = int(result.total_rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        return next(self._rows, None)

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        rows = []
        for _ in range(size or self.arraysize):
            row = self.fetchone()
            if row is None:
                break
            rows.append(row)
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._rows)

    def close(self) -> None:
        self._rows = iter(())

    def __enter__(self) -> SessionCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
