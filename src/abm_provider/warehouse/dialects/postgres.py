"""PostgreSQL: ``COPY ... FROM STDIN`` streamed from the file (or the download) into an all-TEXT stage.

Why all-TEXT staging and validation in SQL: a typed ``COPY`` stops at the first bad value and says
only which line, so one bad number would fail a 1 GB load; PostgreSQL 15 has no ``ON_ERROR``. Text
columns accept every well-formed record, the identity column numbers records in file order, and
one ``UPDATE`` evaluates the shared rules (:mod:`abm_provider.warehouse.schema`) and marks the
few bad rows. While ``COPY`` runs, a thread applies the same rules to the file with Arrow
(:mod:`abm_provider.warehouse.prescan`); when every record passes it the ``UPDATE`` is skipped.
The file is sent in 1 MiB chunks, never read whole, so memory stays flat. A file still downloading
(:mod:`abm_provider.exports.stream`) is sent as its chunks arrive, the pre-scan reading the same bytes
from a second pipe.

Into a table that does not exist yet, the file is first copied straight into the new, typed table
(``COPY ... FREEZE``: the table is new in this transaction, so its rows are written already frozen and
no later vacuum rewrites them) while the same Arrow pass checks it. A repeated key is ruled out by
that pass when the keys come in increasing order, else by one ``GROUP BY`` of the new table. When the
pass finds that every record passes, no key repeats and the copy counted the same records, the rows are
in after one write. Otherwise (a value the rules reject, or one the typed ``COPY`` refuses, or a
repeated key) the transaction is rolled back, the new table with it, and the file is staged as above.
The table gets no unique index: the load's lock keeps one row per key (below), and building the
index was a large share of a big load (docs/performance.md, "Figures behind design choices").

A file ``COPY`` cannot split at all (wrong field count, broken quote, bytes that are not UTF-8)
fails the ``COPY``; the load then rolls back to a savepoint and streams the file again through
Python's ``csv`` module, which sets such records aside as rejects and feeds the rest to ``COPY``
with their record numbers. That pass is several times slower than the plain ``COPY``, which is why
it is only the fallback: exports are machine-written and almost never malformed.

Concurrency: ``pg_advisory_xact_lock`` on a hash of the schema-qualified table name, taken after
staging (so two loads stage in parallel) and held until the commit, so two loads into one table
never interleave their delete and insert. Works with psycopg 3 (what the Postgres provider uses
with SQLAlchemy 2) and psycopg2.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, TYPE_CHECKING, Any

from abm_provider.common.progress import ByteProgress
from abm_provider.warehouse.dialects.base import Filled, NewTable, Staged, lock_number
from abm_provider.warehouse.dialects.capabilities import Capabilities
from abm_provider.warehouse.dialects.options import NoOptions
from abm_provider.warehouse.dialects.postgres_copy import Copied, IterFile, scan_stream
from abm_provider.warehouse.dialects.stripping import STRIPPED
from abm_provider.warehouse.prescan import KeyOrder, day_set, prescan_file
from abm_provider.warehouse.records import iter_records
from abm_provider.warehouse.rules_sql import SqlValidated
from abm_provider.warehouse.schema import EXECUTION_ID_COLUMN, LOADED_AT_COLUMN, STAGE_TABLE, Kind, TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest
    from abm_provider.warehouse.stream import IncomingFile

CHUNK = 1024 * 1024
_PROGRESS_INTERVAL = 30.0  # seconds between COPY progress lines


#: PostgreSQL keeps the first 63 bytes of an ``application_name``.
_APPLICATION_NAME_BYTES = 63

#: Memory for the load's sorts and hashes (duplicate keys, the replace join), unless the session has more.
WORK_MEM = "256MB"


class PostgresDialect(SqlValidated):
    name = "postgres"
    options_type = NoOptions
    capabilities = Capabilities(
        bulk_path="postgres_copy",
        table_lock="sessions",  # a transaction-scoped advisory lock
        session_locks=True,
        names_lock_holder=True,
        direct_new_table=True,
        stream_readers=2,  # COPY reads the download as it arrives, and the Arrow pre-scan beside it
        # No unique index: the delete and insert under the load's lock already keep one row per key,
        # and building one is a large share of a big load; a repeated key in the file is found by the
        # pre-scan (keys in order) or a GROUP BY.
        unique_key_index=False,
        add_column_if_not_exists=True,
        rules_in_sql=True,
        full_outer_join=True,
        param_style="format",
        temporary_tables=True,
        multi_statement_transactions=True,
        # PostgreSQL spells it DELETE ... USING, and plans EXISTS as the same join.
        delete_using_join=False,
        transactional_ddl=True,
        lock_rows=True,
        strips_like_python=True,
    )
    text_type_codes = frozenset({"25", "1043"})  # text, varchar (psycopg and psycopg2 give the type's OID)

    def begin(self, cur: Any) -> None:
        # Transaction-local, and only ever raised: the default 4MB sends a million-key GROUP BY to disk.
        cur.execute(
            "SELECT set_config('work_mem', %s, true) "
            "WHERE pg_size_bytes(current_setting('work_mem')) < pg_size_bytes(%s)",
            [WORK_MEM, WORK_MEM],
        )

    def streaming_cursor(self, conn: Any) -> Any:
        # A named (server-side) cursor: the result stays on the server and is fetched in pieces.
        return conn.cursor(name=f"abm_{uuid.uuid4().hex[:12]}")

    def analyze(self, cur: Any, table_sql: str) -> None:
        cur.execute(f"ANALYZE {table_sql}")

    def insert_rows(
        self, cur: Any, table_sql: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        if not hasattr(cur, "copy"):  # psycopg2: no row-wise COPY writer
            super().insert_rows(cur, table_sql, columns, rows)
            return
        with cur.copy(f"COPY {table_sql} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    # A session-level advisory lock on a 64-bit hash of the key: it spans the session's transactions
    # and dies with the connection, so a killed task cannot leave it behind. The holder names itself
    # in its session's ``application_name``, read back through ``pg_locks`` and ``pg_stat_activity``.

    def creation_lock(self, cur: Any, key: str) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [lock_number(key)])

    def try_session_lock(self, cur: Any, key: str, label: str) -> bool:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [lock_number(key)])
        if not cur.fetchone()[0]:
            return False
        name = label.encode()[:_APPLICATION_NAME_BYTES].decode(errors="ignore")
        cur.execute("SELECT set_config('application_name', %s, false)", [name])
        cur.fetchall()
        return True

    def session_lock_holder(
        self, cur: Any, key: str
    ) -> tuple[str | None, dt.datetime | None, int | None] | None:
        number = lock_number(key)
        # The lock's 64-bit key is split into two 32-bit halves in pg_locks.
        cur.execute(
            "SELECT a.application_name, a.backend_start, l.pid FROM pg_locks l "
            "LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.objsubid = 1 AND l.classid = CAST(%s AS oid) "
            "AND l.objid = CAST(%s AS oid) AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())",
            [(number >> 32) & 0xFFFFFFFF, number & 0xFFFFFFFF],
        )
        found = cur.fetchall()
        if not found:
            return None
        label, since, pid = found[0]
        return (str(label) if label else None), since, (int(pid) if pid is not None else None)

    def release_session_lock(self, cur: Any, key: str) -> None:
        cur.execute("SELECT pg_advisory_unlock(%s)", [lock_number(key)])
        cur.fetchall()

    def passes_sql(self, plan: ColumnPlan, keys: Sequence[str]) -> str:
        """True for a staged row every rule accepts; false when it needs the full check.

        Why: PostgreSQL's regular expressions are slow with alternations and bounded repeats, and the
        CASE of ``reason_sql`` runs such a pattern per typed column of every row: most of a 1 GB
        load's time. Simple character classes plus length and range comparisons accept exactly the
        same values at a third of the cost; the CASE then runs only on the rows this does not pass
        (normally none), so every reject still gets its exact reason.
        """
        checks = [f"{self.quote(k)} <> ''" for k in keys]
        checks += [
            _value_passes_sql(self.quote(n), plan.kinds[n]) for n in plan.header if plan.kinds[n].pattern
        ]
        return f"COALESCE({' AND '.join(checks)}, false)" if checks else "true"

    def strip_sql(self, expression: str) -> str:
        # BTRIM takes a set of characters; \\u escapes need a UTF8 database, as PostgreSQL's own are.
        characters = "".join(f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}" for c in STRIPPED)
        return f"BTRIM({expression}, E'{characters}')"

    def matches_sql(self, column: str, pattern: str) -> str:
        return f"{column} ~ '^({pattern})$'"

    def valid_sql(self, column: str, kind: Kind) -> str:
        check = self.matches_sql(column, str(kind.pattern))
        if kind is Kind.DATE:
            check = f"CASE WHEN {check} THEN {_calendar_sql(column)} ELSE false END"
        return check

    def lock(self, cur: Any, table: TableName) -> None:
        cur.execute(
            "SELECT pg_advisory_xact_lock(hashtext('abm_provider.load:' || "
            "COALESCE(CAST(%s AS TEXT), current_schema()) || '.' || %s))",
            [table.schema, table.name],
        )

    def fill_new_table(self, cur: Any, new: NewTable) -> Filled | None:
        request, plan = new.request, new.plan
        target = self.table_sql(request.table)
        quote = self.quote
        # The lineage values become the new table's column defaults for the COPY (quoted by the
        # server), so every row gets them without a second write; the defaults go again after.
        cur.execute(
            "SELECT COALESCE(quote_literal(CAST(%s AS TEXT)), 'NULL'), quote_literal(CAST(%s AS TIMESTAMP))",
            [request.execution_id, new.loaded_at],
        )
        execution, at = cur.fetchone()
        cur.execute(
            f"ALTER TABLE {target} ALTER COLUMN {quote(EXECUTION_ID_COLUMN)} SET DEFAULT {execution}, "
            f"ALTER COLUMN {quote(LOADED_AT_COLUMN)} SET DEFAULT CAST({at} AS TIMESTAMP)"
        )
        names = ", ".join(quote(n) for n in plan.header)
        sql = f"COPY {target} ({names}) FROM STDIN WITH (FORMAT csv, HEADER true, FREEZE true)"
        copied = self._copy_data(cur, request, plan, sql, new.incoming)
        if isinstance(copied, str):
            self.log.info("The typed COPY refused %s (%s); staging it", request.path.name, copied)
            return None
        if not copied.all_pass:
            self.log.info("%s has records the column rules may reject; staging it", request.path.name)
            return None
        # Dropped before the key check: a repeated key rolls the whole transaction back anyway.
        cur.execute(
            f"ALTER TABLE {target} ALTER COLUMN {quote(EXECUTION_ID_COLUMN)} DROP DEFAULT, "
            f"ALTER COLUMN {quote(LOADED_AT_COLUMN)} DROP DEFAULT"
        )
        return Filled(copied.rows, keys_unique=copied.keys_unique, days=copied.proven_days)

    def stage(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str, incoming: IncomingFile
    ) -> Staged:
        columns = ", ".join(f"{self.quote(n)} TEXT" for n in plan.header)
        names = ", ".join(self.quote(n) for n in plan.header)
        cur.execute(f"DROP TABLE IF EXISTS {STAGE_TABLE}")
        cur.execute(
            f"CREATE TEMP TABLE {STAGE_TABLE} (_rec BIGINT GENERATED BY DEFAULT AS IDENTITY, {columns}, "
            "_reason TEXT) ON COMMIT DROP"
        )
        cur.execute("SAVEPOINT abm_copy")
        structural: dict[int, str] = {}
        sql = f"COPY {STAGE_TABLE} ({names}) FROM STDIN WITH (FORMAT csv, HEADER true)"
        copied = self._copy_data(cur, request, plan, sql, incoming)
        if isinstance(copied, str):
            self.log.warning(
                "COPY refused %s (%s); streaming it again through Python to set malformed records aside",
                request.path.name,
                copied,
            )
            cur.execute("ROLLBACK TO SAVEPOINT abm_copy")
            incoming.wait_for_download()  # the Python pass reads the whole file
            structural = self._copy_checked(cur, request, plan, names)
            copied = Copied(-1, None, keys_increasing=False)
        cur.execute("RELEASE SAVEPOINT abm_copy")
        if copied.all_pass:
            self.log.info("Every one of the %d records passed the column rules (Arrow pre-scan)", copied.rows)
        else:
            passes = self.passes_sql(plan, request.key_columns)
            cur.execute(
                # A CASE, because the planner may evaluate ANDed conditions in any order.
                f"UPDATE {STAGE_TABLE} SET _reason = {reason_sql} "
                f"WHERE CASE WHEN {passes} THEN false ELSE ({reason_sql}) IS NOT NULL END"
            )
        if plan.table_exists:
            # Statistics for the join that deletes restated keys; a new table has none to delete.
            self.analyze(cur, STAGE_TABLE)
        if copied.keys_unique:
            self.log.info("The natural keys come in increasing order: none repeats")
        return Staged(
            rejects=structural,
            rules_checked=copied.all_pass,
            keys_unique=copied.keys_unique,
            days=copied.proven_days,
        )

    def _copy_data(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, sql: str, incoming: IncomingFile
    ) -> Copied | str:
        """:meth:`_copy_prescanned`, or the first line of why when ``COPY`` refused the file's data."""
        try:
            return self._copy_prescanned(cur, request, plan, sql, incoming)
        except Exception as exc:
            if not _is_data_error(exc):
                raise
            return str(exc).splitlines()[0]

    def _copy_prescanned(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, sql: str, incoming: IncomingFile
    ) -> Copied:
        """``COPY`` the file with ``sql`` while the Arrow pre-scan reads it beside.

        When the ``COPY`` fails the pre-scan is stopped and waited for, and the error raised. A file
        still downloading is read from the stream's two readers, one for each.
        """
        stop = threading.Event()
        order = KeyOrder()
        days = day_set(request, plan)
        readers = incoming.arriving_readers()
        with ThreadPoolExecutor(1, thread_name_prefix="abm-prescan") as pool:
            if readers:
                data, beside = readers
                prescan = pool.submit(scan_stream, beside, plan, request.key_columns, stop, order, days)
            else:
                prescan = pool.submit(prescan_file, request, plan, stop, order, days)
            try:
                if readers:
                    rows = self._copy(cur, sql, _progress(data.chunks(), request.size, self.log))
                else:
                    with request.path.open("rb") as handle:
                        rows = self._copy(cur, sql, _progress(_read(handle), request.size, self.log))
            except BaseException:
                # Both readers are let go, which wakes the pre-scan's read-ahead thread if it waits on
                # its pipe: the pool below waits for the scan, and the interpreter at exit for Arrow's
                # I/O threads.
                stop.set()
                if readers:
                    data.detach()
                    beside.detach()
                raise
            passed = prescan.result()
        return Copied(rows, passed, order.increasing, None if days is None else tuple(sorted(days.values)))

    def _copy_checked(self, cur: Any, request: LoadRequest, plan: ColumnPlan, names: str) -> dict[int, str]:
        structural: dict[int, str] = {}

        def rows() -> Iterator[bytes]:
            buffer = io.StringIO()
            # Everything quoted: a CR must be, and so is ``\.``, which COPY would take as end of data.
            writer = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
            for record in iter_records(request.path, len(plan.header)):
                if record.error is not None or record.fields is None:
                    structural[record.number] = f"malformed record ({record.error})"
                    continue
                writer.writerow([record.number, *record.fields])
                if buffer.tell() >= CHUNK:
                    yield buffer.getvalue().encode("utf-8")
                    buffer.seek(0)
                    buffer.truncate()
            if buffer.tell():
                yield buffer.getvalue().encode("utf-8")

        # csv cannot tell a quoted empty field from an empty one; FORCE_NULL makes both NULL, as the
        # fast path treats the (usual) unquoted empty field.
        sql = f"COPY {STAGE_TABLE} (_rec, {names}) FROM STDIN WITH (FORMAT csv, FORCE_NULL ({names}))"
        self._copy(cur, sql, rows())
        return structural

    @staticmethod
    def _copy(cur: Any, sql: str, chunks: Iterator[bytes]) -> int:
        """Run ``COPY ... FROM STDIN`` over the chunks; the rows it stored (-1 if the driver won't say)."""
        if hasattr(cur, "copy"):  # psycopg 3
            with cur.copy(sql) as copy:
                for chunk in chunks:
                    copy.write(chunk)
        else:  # psycopg2 reads from a file-like object
            cur.copy_expert(sql, IterFile(chunks), size=CHUNK)
        return int(cur.rowcount) if cur.rowcount is not None else -1


def _value_passes_sql(column: str, kind: Kind) -> str:
    """SQL true exactly when a non-NULL text matches ``kind.pattern`` (NULL in, NULL out)."""
    if kind is Kind.COUNT:  # -?[0-9]{1,18}
        return f"({column} ~ '^-?[0-9]+$' AND length(ltrim({column}, '-')) <= 18)"
    if kind is Kind.MONEY:  # -?[0-9]{1,16}(\.[0-9]{1,2})?
        return (
            f"({column} ~ '^-?[0-9]+(\\.[0-9][0-9]?)?$' "
            f"AND length(split_part(ltrim({column}, '-'), '.', 1)) <= 16)"
        )
    if kind is Kind.DATE:  # a year 0001-9999, month 01-12, day 01-31, and a day the month has
        day = f"substr({column}, 9, 2)"
        return (
            f"({column} ~ '^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]$' "
            f"AND substr({column}, 1, 4) <> '0000' AND substr({column}, 6, 2) BETWEEN '01' AND '12' "
            f"AND {day} BETWEEN '01' AND '31' AND ({day} <= '28' OR {_calendar_sql(column)}))"
        )
    raise ValueError(f"no character-class check for {kind}")


def _calendar_sql(column: str) -> str:
    """True when a ``YYYY-MM-DD`` text (already matching the pattern, which bounds month and day) is a
    day the month has (not 02-30), decided without a cast that would abort the statement."""
    return (
        f"to_char(CAST(substr({column}, 1, 8) || '01' AS DATE) "
        f"+ (CAST(substr({column}, 9, 2) AS INTEGER) - 1), 'YYYY-MM-DD') = {column}"
    )


def _read(handle: IO[bytes]) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        yield chunk


def _progress(chunks: Iterator[bytes], size: int, log: Any) -> Iterator[bytes]:
    """The chunks on their way to ``COPY``, with progress lines (``size`` 0: not known yet)."""
    return ByteProgress(log, "COPY", _PROGRESS_INTERVAL).through(chunks, size or None)


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg 3 (``sqlstate``) or psycopg2 (``pgcode``) error."""
    code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return code if isinstance(code, str) else None


def _is_data_error(exc: BaseException) -> bool:
    """SQLSTATE class 22 (data exception): bad field count, broken quoting, invalid encoding."""
    code = _sqlstate(exc)
    return code is not None and code.startswith("22")
