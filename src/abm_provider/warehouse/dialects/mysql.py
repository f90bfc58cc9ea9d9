"""MySQL and MariaDB: ``LOAD DATA LOCAL INFILE`` into a typed stage, with the Arrow pre-scan beside it.

The server reads the file as the client sends it, and the Arrow pre-scan
(:mod:`abm_provider.warehouse.prescan`) checks every record against the column rules on a thread
meanwhile. The stage is kept only when the two agree on every record: the pre-scan found that all
of them pass, it counted as many records as the server stored, and the server raised no warning
(a short or long record, a value it had to convert loosely, bytes that are not UTF-8). Otherwise
the stage is emptied and the file staged through Python as the generic path does, which sets each
bad record aside with its line and reason: a file with a record to reject; a carriage return, a NUL
byte or the word ``NULL``, which ``LOAD DATA`` reads differently from a CSV parser; or a server or
client that refuses ``LOCAL INFILE``. Exports are machine-written, so the fast path is the norm.

``LOCAL INFILE`` needs ``local_infile`` on both sides: the hook's connection is opened with it
(``MySqlHook.local_infile``), and a server with ``local_infile=OFF`` refuses the statement, which
is logged once per load before the Python path runs.

Text columns are ``utf8mb4_bin``: MySQL's default collations compare case-insensitively, which would
make ``T1`` and ``t1`` one natural key. The natural key gets no unique index (MySQL cannot index a
``TEXT`` column without a prefix length); the load's lock keeps one row per key, as on PostgreSQL.
The stage gets an index on the key for the delete of restated rows.

Transactions: MySQL commits implicitly before ``CREATE TABLE`` and ``ALTER TABLE``, so the flow's
DDL (a new table or ledger, an added column) is committed before the delete and insert, which stay
one transaction with the ledger row. A load killed after creating a new table leaves it empty. So
there is no one-pass load into a new table (``direct_new_table``): it could not be rolled back.
Sessions run at ``READ COMMITTED``, so the ledger re-read under the lock sees what the load that
held it before committed.

Concurrency: ``GET_LOCK`` on a hash of the schema-qualified table name, taken after staging and
held by the session until it closes at the end of the load.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from abm_provider.warehouse.dialects.base import Staged
from abm_provider.warehouse.dialects.capabilities import Capabilities
from abm_provider.warehouse.dialects.generic import GenericDialect
from abm_provider.warehouse.dialects.options import NoOptions
from abm_provider.warehouse.dialects.stripping import stripped_class
from abm_provider.warehouse.prescan import KeyOrder, prescan_file
from abm_provider.warehouse.schema import STAGE_TABLE, Kind, TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import LoadRequest
    from abm_provider.warehouse.stream import IncomingFile

#: How long a load waits for another load of the same table to end.
LOCK_WAIT_SECONDS = 7 * 24 * 3600
#: LOAD DATA reads an unquoted field ``NULL`` as SQL NULL, where a CSV parser reads the text "NULL".
_UNQUOTED_NULL = {b"NULL": "the word NULL"}
#: Characters of a text key column the stage's index covers (an index cannot cover a whole TEXT).
_KEY_PREFIX = 191
#: How a cast spells the standard types the other dialects cast to.
_CAST_TYPES = {"TEXT": "CHAR", "BIGINT": "SIGNED", "INTEGER": "SIGNED"}
#: Column types (as SHOW COLUMNS spells them) whose values reach Python as text.
_TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")


class MySQLDialect(GenericDialect):
    name = "mysql"
    options_type = NoOptions
    capabilities = Capabilities(
        bulk_path="mysql_load_data",
        table_lock="sessions",  # GET_LOCK, held by the session until the load ends
        session_locks=True,
        # The server knows the holder's connection, not its run: a refused run is told that id.
        names_lock_holder=False,
        # DDL commits by itself: a one-pass load into a new table could not be rolled back.
        direct_new_table=False,
        stream_readers=0,
        unique_key_index=False,  # a TEXT key cannot be indexed whole; the load's lock keeps one row per key
        add_column_if_not_exists=False,  # MariaDB has it, MySQL 8 does not
        rules_in_sql=True,
        # And a temporary table cannot be named twice in one statement: a source is staged whole.
        full_outer_join=False,
        param_style="format",
        temporary_tables=True,
        multi_statement_transactions=True,  # for DML: DDL commits by itself
        # A join lets the server start from the few plan rows; MariaDB runs EXISTS once per member.
        delete_using_join=True,
        transactional_ddl=False,
        lock_rows=True,
        strips_like_python=True,
    )
    current_schema_sql = "DATABASE()"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.quote_format = "`{}`"

    def type_sql(self, sql_type: str) -> str:
        # TIMESTAMP holds 1970 to 2038 in the session's time zone and whole seconds: the load times
        # are naive UTC, and two loads of one second must still be told apart in the ledger.
        return "DATETIME(6)" if sql_type == "TIMESTAMP" else sql_type

    def text_sql(self, length: int | None = None) -> str:
        return f"{super().text_sql(length)} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

    def column_type(self, kind: Kind) -> str:
        return self.text_sql() if kind is Kind.TEXT else kind.sql_type

    def key_index_sql(self, columns: Sequence[str]) -> str:
        # MySQL looks a correlated ``[NOT] EXISTS`` up row by row: without an index, a scan per row.
        return f", INDEX _abm_key ({', '.join(columns)})"

    def cast_sql(self, expression: str, sql_type: str) -> str:
        # A cast's target is CHAR or SIGNED here, never TEXT or BIGINT.
        return f"CAST({expression} AS {_CAST_TYPES.get(sql_type, sql_type)})"

    def char_length_sql(self, expression: str) -> str:
        return f"CHAR_LENGTH({expression})"  # LENGTH counts bytes here

    def exact_sql(self, expression: str) -> str:
        # The default collations compare without case and ignore trailing spaces (PAD SPACE): the
        # bytes are compared instead.
        return f"CAST({expression} AS BINARY)"

    # ---- the list sync's rules in SQL ------------------------------------------------------------
    def matches_sql(self, column: str, pattern: str) -> str:
        # Character by character in a binary collation, which folds no case (MySQL 8 refuses a binary
        # string in a regular expression). The pattern goes as a hex literal, which no sql_mode
        # (NO_BACKSLASH_ESCAPES) reads differently.
        anchored = f"^({pattern})$".encode("ascii").hex()
        return (
            f"CONVERT({column} USING utf8mb4) COLLATE utf8mb4_bin REGEXP CONVERT(X'{anchored}' USING utf8mb4)"
        )

    def strip_sql(self, expression: str) -> str:
        # TRIM takes off one string, not a set of characters. The expression goes as a hex literal,
        # which no sql_mode reads differently; PCRE (MariaDB) and ICU (MySQL 8) both read \x{...}.
        # The key comes out in the state tables' binary collation: utf8mb4's default folds case, so
        # two ids differing in case only would group, join and DISTINCT as one account.
        bracket = stripped_class("\\x{{{:04x}}}")
        pattern = f"^{bracket}+|{bracket}+$".encode("ascii").hex()
        subject = f"CONVERT({expression} USING utf8mb4)"
        return f"REGEXP_REPLACE({subject}, CONVERT(X'{pattern}' USING utf8mb4), '') COLLATE utf8mb4_bin"

    def numbered_copy_sql(self, table: str, query: str, record: str) -> str:
        # A window over a derived table numbers in whatever order the window sorts by, and a derived
        # table may drop its ORDER BY. The query itself fills the table instead, and the counter
        # numbers its rows as they arrive, in the query's order.
        return f"CREATE TEMPORARY TABLE {table} ({record} BIGINT AUTO_INCREMENT PRIMARY KEY) AS\n{query}"

    def md5_sql(self, parts: Sequence[str]) -> str:
        return f"MD5(CONCAT_WS(CHAR(31 USING utf8mb4), {', '.join(parts)}))"

    def described_columns(self, cur: Any, relation: str) -> list[tuple[str, bool]]:
        # The driver's type codes do not tell TEXT from BLOB, nor VARCHAR from VARBINARY: the server's
        # own column types do (SHOW COLUMNS sees a session's temporary tables too).
        if relation.startswith("("):
            return [(name, False) for name, _ in super().described_columns(cur, relation)]
        cur.execute(f"SHOW COLUMNS FROM {relation}")
        return [(str(row[0]), str(row[1]).lower().startswith(_TEXT_TYPES)) for row in cur.fetchall()]

    def connect(self) -> Any:
        if hasattr(self.hook, "local_infile"):
            self.hook.local_infile = True  # the client side of LOAD DATA LOCAL
        conn = super().connect()
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.close()
        return conn

    def streaming_cursor(self, conn: Any) -> Any:
        module = type(conn).__module__
        if module.startswith("MySQLdb"):
            from MySQLdb.cursors import SSCursor

            return conn.cursor(SSCursor)
        if module.startswith("pymysql"):
            from pymysql.cursors import SSCursor as PyMySQLSSCursor

            return conn.cursor(PyMySQLSSCursor)
        return conn.cursor()

    def analyze(self, cur: Any, table_sql: str) -> None:
        cur.execute(f"ANALYZE TABLE {table_sql}")
        cur.fetchall()

    # ``GET_LOCK``: held by the session until released or the connection ends. The server knows the
    # holder's connection, not its run: a refused run is told the holder's connection id.

    def try_session_lock(self, cur: Any, key: str, label: str) -> bool:
        cur.execute("SELECT GET_LOCK(%s, 0)", [_lock_name(key)])
        return cur.fetchone()[0] == 1

    def session_lock_holder(
        self, cur: Any, key: str
    ) -> tuple[str | None, dt.datetime | None, int | None] | None:
        cur.execute("SELECT IS_USED_LOCK(%s)", [_lock_name(key)])
        row = cur.fetchone()
        return (None, None, int(row[0])) if row and row[0] is not None else None

    def release_session_lock(self, cur: Any, key: str) -> None:
        cur.execute("SELECT RELEASE_LOCK(%s)", [_lock_name(key)])
        cur.fetchall()

    def lock(self, cur: Any, table: TableName) -> None:
        cur.execute(
            "SELECT GET_LOCK(CONCAT('abm_load:', "
            "SHA1(CONCAT(COALESCE(CAST(%s AS CHAR), DATABASE()), '.', %s))), %s)",
            [table.schema, table.name, LOCK_WAIT_SECONDS],
        )
        row = cur.fetchone()
        if not row or row[0] != 1:
            raise TimeoutError(f"no lock on {table} after {LOCK_WAIT_SECONDS} s: another load keeps it")

    def stage(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, reason_sql: str, incoming: IncomingFile
    ) -> Staged:
        record = "_rec BIGINT AUTO_INCREMENT PRIMARY KEY"
        if plan.table_exists:
            # The delete of restated rows looks each table row up in the stage by key. Declared with
            # the stage, the index is filled as the rows arrive: adding it afterwards copies the table.
            record += self.key_index_sql(
                [
                    f"{self.quote(k)}({_KEY_PREFIX})" if plan.kinds[k] is Kind.TEXT else self.quote(k)
                    for k in request.key_columns
                ]
            )
        self.create_stage(cur, plan, record)
        staged = self._load_data(cur, request, plan, incoming)
        if staged is None:
            cur.execute(f"DELETE FROM {STAGE_TABLE}")
            staged = self.stage_checked(cur, request, plan)
        if plan.table_exists:
            self.analyze(cur, STAGE_TABLE)
        return staged

    def _load_data(
        self, cur: Any, request: LoadRequest, plan: ColumnPlan, incoming: IncomingFile
    ) -> Staged | None:
        """``LOAD DATA`` the file with the pre-scan beside it; ``None`` when the Python path must stage it."""
        odd = incoming.awkward_bytes(_UNQUOTED_NULL)
        if odd:
            self.log.warning(
                "%s contains %s, which LOAD DATA reads unlike a CSV parser; staging it through Python",
                request.path.name,
                odd,
            )
            return None
        fields = ", ".join(f"@v{i}" for i in range(len(plan.header)))
        values = ", ".join(f"{self.quote(n)} = NULLIF(@v{i}, '')" for i, n in enumerate(plan.header))
        sql = (
            f"LOAD DATA LOCAL INFILE %s INTO TABLE {STAGE_TABLE} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' "
            f"LINES TERMINATED BY '\\n' IGNORE 1 LINES ({fields}) SET {values}"
        )
        stop = threading.Event()
        order = KeyOrder()
        with ThreadPoolExecutor(1, thread_name_prefix="abm-prescan") as pool:
            prescan = pool.submit(prescan_file, request, plan, stop, order)
            try:
                cur.execute(sql, [str(request.path)])
            except Exception as exc:
                stop.set()
                if not _refused(exc):
                    raise
                self.log.warning(
                    "The server refused LOAD DATA LOCAL INFILE (%s); staging %s through Python. "
                    "Set local_infile=ON on the server for the bulk path.",
                    str(exc).splitlines()[0],
                    request.path.name,
                )
                return None
            rows = int(cur.rowcount)
            cur.execute("SHOW COUNT(*) WARNINGS")
            warnings = int(cur.fetchone()[0])
            passed = prescan.result()
        if warnings or passed is None or passed != rows:
            self.log.info(
                "%s has records the column rules may reject (%s); staging it through Python",
                request.path.name,
                f"{warnings} warning(s) from LOAD DATA" if warnings else "the pre-scan doubts one",
            )
            return None
        self.log.info("Every one of the %d records passed the column rules (Arrow pre-scan)", rows)
        return Staged(rules_checked=True, keys_unique=order.increasing)


def _lock_name(key: str) -> str:
    """A ``GET_LOCK`` name for ``key`` (MySQL takes at most 64 characters)."""
    return "abm_sync:" + hashlib.sha1(key.encode("utf-8"), usedforsecurity=False).hexdigest()


def _refused(exc: BaseException) -> bool:
    """The server or client will not do ``LOCAL INFILE`` (MySQL errors 1148, 3948, 2068; MariaDB 4166)."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    return code in {1148, 2068, 3948, 4166} or ("local" in str(exc).lower() and "infile" in str(exc).lower())
