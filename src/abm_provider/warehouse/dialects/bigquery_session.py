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

The client finds its endpoint itself: ``google-cloud-bigquery`` honours ``BIGQUERY_EMULATOR_HOST``,
which is how the tests reach the bqemulator.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterator, Sequence
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


def _first_words(sql: str) -> str:
    return sql[_LEADING.match(sql).end() :]  # type: ignore[union-attr]  # the pattern matches any text


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
    from google.cloud.bigquery import ScalarQueryParameter

    if isinstance(value, ScalarQueryParameter):
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

    def __init__(self, client: Any, *, location: str | None = None) -> None:
        self.client = client
        self.location = location
        self.session_id: str | None = None
        self.default_dataset: str | None = None
        self.in_transaction = False
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

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> SessionCursor:
        conn = self.connection
        self.description, self.rowcount, self.job, self._rows = None, -1, None, iter(())
        statement = _first_words(sql)
        for pattern, action in ((_BEGIN, conn.begin), (_COMMIT, conn.commit), (_ROLLBACK, conn.rollback)):
            if pattern.fullmatch(statement):
                action()
                return self
        reopen = conn.in_transaction and is_ddl(sql)
        if reopen:
            conn.commit()
        self.job, result = conn.run(sql, params)
        if reopen:
            conn.begin()
        self._read(self.job, result)
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> SessionCursor:
        """One job per row: BigQuery has no batch binding (``insert_rows`` is for a few rows only)."""
        total = 0
        for params in seq_of_params:
            self.execute(sql, params)
            total += max(self.rowcount, 0)
        self.rowcount = total
        return self

    def _read(self, job: Any, result: Any) -> None:
        affected = job.num_dml_affected_rows
        schema = list(result.schema or ())
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
