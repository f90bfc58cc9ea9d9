"""The test warehouses: one registry of every database a test loads into, syncs with or reads back.

The code under test reaches a test's warehouse through an Airflow connection set in the environment
(:attr:`Warehouse.conn_env`); the test reads it back with the database's own driver, never through the
code it checks. Each question a test asks a database has one helper here: which tables, does one
exist, how many rows, which columns, does the server answer, a schema or database for one test.

Servers: DuckDB and SQLite files; PostgreSQL at 127.0.0.1:5432 (``postgres``, trust); MariaDB at
127.0.0.1:3306 (``root``, no password). A server that does not answer skips the test, saying why.

Isolation (``make test`` runs two pytest processes at once): DuckDB and SQLite, a file in the test's
``tmp_path``; PostgreSQL, a schema of the test's own (``<prefix>_<hex>``) in its :class:`Suite`'s
database (suites whose tables share names keep a database each; the DAG tests' unqualified tables are
used by ``tests/dags`` alone, in one process); MariaDB, a database of the test's own; the emulator,
one per pytest process (``tests/conftest.py``). ``tests/smoke`` keeps its own settings: it runs in the
release venvs without the repository's conftest. The generic path runs on PostgreSQL and on SQLite
through :class:`SqliteTestHook` (no SQLite provider): another parameter style, no native types.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.sql.hooks.sql import DbApiHook

from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator
from support.export_files import TACTIC_COLUMNS, normalise, table_contents

#: Every kind of test warehouse; ``postgres_generic`` is PostgreSQL loaded by the generic path.
KINDS = ("duckdb", "postgres", "postgres_generic", "sqlite", "mariadb")
#: How connection ids name each kind (``wh_pg``, ``crash_duckdb``...).
_SHORT = dict(duckdb="duckdb", postgres="pg", postgres_generic="pg", sqlite="sqlite", mariadb="mysql")
MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "connect_timeout": 3}


@dataclass(frozen=True)
class Suite:
    """Tests that share a PostgreSQL database, and how they name what they make there and on MariaDB."""

    #: Schemas and MariaDB databases are ``<prefix>_<10 hex>``.
    prefix: str
    #: The PostgreSQL database (created on first use when missing).
    database: str
    #: The Airflow connection id, ``{kind}`` standing for the kind's short name.
    conn_id: str = "wh_{kind}"
    #: The database a MariaDB connection opens; ``None``: the test's own. The loads open ``test`` and
    #: name their table with the test's database, as a user loading into another database would.
    mariadb_home: str | None = None
    mariadb_charset: str | None = None

    def connection(self, kind: str) -> str:
        return self.conn_id.format(kind=_SHORT[kind])


#: The loader tests (``test`` is the database CI creates).
LOADS = Suite("abm_load", "test", mariadb_home="test")
#: The list-sync tests: their state tables have the same names in every test.
SYNC = Suite("sync", "abm_synctest", conn_id="abm_warehouse", mariadb_charset="utf8mb4")
#: The crash and bad-input tests, whose tasks run in child processes.
CRASH = Suite("crash", "abm_crash", conn_id="crash_{kind}")
#: The example DAGs, which create unqualified tables: no schema per test, tables dropped before each.
DAGS = Suite("abm_dag", "abm_dagtest", conn_id="abm_warehouse")


# --- the servers ------------------------------------------------------------------------------------


def postgres_dsn(database: str = LOADS.database) -> str:
    """A libpq connection string for ``database`` on the test PostgreSQL."""
    return f"host=127.0.0.1 port=5432 user=postgres dbname={database} connect_timeout=3"


def postgres_conn_env(database: str = LOADS.database) -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON) for a ``postgres`` connection to ``database``."""
    return json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": 5432, "login": "postgres", "schema": database}
    )


def mysql_conn_env(database: str = "test") -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON) for a ``mysql`` connection to ``database`` on the test MariaDB."""
    return json.dumps(
        {"conn_type": "mysql", "host": "127.0.0.1", "port": 3306, "login": "root", "schema": database}
    )


def duckdb_conn_env(path: Path | str, **extra: Any) -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON) for a ``duckdb`` connection to the file at ``path``."""
    return json.dumps({"conn_type": "duckdb", "host": str(path), "extra": extra})


def postgres_unusable(database: str = LOADS.database) -> str | None:
    """``None`` when ``database`` on the test PostgreSQL answers (created first if missing), else why not."""
    try:
        import psycopg

        with psycopg.connect(postgres_dsn("postgres"), autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
            if found is None:
                conn.execute(f'CREATE DATABASE "{database}"')
        with psycopg.connect(postgres_dsn(database)):
            return None
    except Exception as exc:
        return f"PostgreSQL at 127.0.0.1:5432 (database {database}, user postgres) is unusable: {exc}"


def require_postgres(database: str = LOADS.database) -> None:
    """Skip the test, saying why, when ``database`` on the test PostgreSQL does not answer."""
    reason = postgres_unusable(database)
    if reason:
        pytest.skip(reason)


def mariadb_server(**options: Any) -> Any:
    """A connection to the test MariaDB's server; the test is skipped, saying why, when it does not answer."""
    import MySQLdb  # the [mysql] extra: a missing driver is a failed install, not a reason to skip

    try:
        return MySQLdb.connect(**MARIADB, **options)
    except MySQLdb.OperationalError as exc:
        pytest.skip(f"MariaDB at 127.0.0.1:3306 (user root, no password) is not reachable: {exc}")


@contextmanager
def postgres_schema(suite: Suite = LOADS) -> Iterator[str]:
    """A schema of its own in ``suite``'s PostgreSQL database, dropped after; skips when it is down."""
    require_postgres(suite.database)
    import psycopg

    schema = f"{suite.prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn(suite.database), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(postgres_dsn(suite.database), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def mariadb_database(suite: Suite = LOADS) -> Iterator[str]:
    """A database of its own on the test MariaDB, dropped after; skips when the server is down."""
    name = f"{suite.prefix}_{uuid.uuid4().hex[:10]}"
    charset = f" CHARACTER SET {suite.mariadb_charset}" if suite.mariadb_charset else ""
    with closing(mariadb_server()) as conn:
        conn.cursor().execute(f"CREATE DATABASE `{name}`{charset}")
    try:
        yield name
    finally:
        with closing(mariadb_server()) as conn:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")


class SqliteTestHook(DbApiHook):
    """A common-sql hook over a SQLite file, standing in for "any other DbApiHook"."""

    conn_name_attr = "sqlite_conn_id"
    default_conn_name = "sqlite_default"
    conn_type = "sqlite"
    placeholder = "?"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def get_conn(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path)


# --- one test's warehouse ---------------------------------------------------------------------------


class Warehouse:
    """One test's warehouse. ``location``: the DuckDB or SQLite file, or the database a PostgreSQL or
    MariaDB connection opens; ``schema``: where the test's tables go (``None``: the connection's
    default); ``table``: the export table loads go to. SQLite has no Airflow connection: operators
    get ``hook``."""

    def __init__(
        self,
        kind: str,
        conn_id: str,
        location: Path | str,
        *,
        schema: str | None = None,
        table: str = "tactic_perf",
        method: str | None = None,
        **extra: Any,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.conn_id = conn_id
        self.location = str(location)
        self.schema = schema
        self.extra = extra
        self.method = method or ("generic" if kind == "postgres_generic" else "auto")
        self.hook = SqliteTestHook(Path(location)) if kind == "sqlite" else None
        self.table = self.name(table)
        self.ledger = self.name("abm_load_ledger")

    @property
    def conn_env(self) -> str:
        """The ``AIRFLOW_CONN_*`` value that reaches this warehouse."""
        if self.kind == "duckdb":
            return duckdb_conn_env(self.location, **self.extra)
        if self.kind == "mariadb":
            return mysql_conn_env(self.location)
        if self.kind == "sqlite":
            raise ValueError("a SQLite warehouse has no Airflow connection: operators get its hook")
        return postgres_conn_env(self.location)

    def use(self, monkeypatch: pytest.MonkeyPatch) -> Warehouse:
        """Set the Airflow connection ``conn_id`` to this warehouse, for the test (none for SQLite)."""
        if self.kind != "sqlite":
            monkeypatch.setenv(f"AIRFLOW_CONN_{self.conn_id.upper()}", self.conn_env)
        return self

    def with_table(self, table: str) -> Warehouse:
        """The same warehouse with ``table`` (unqualified) as its export table."""
        return Warehouse(
            self.kind,
            self.conn_id,
            self.location,
            schema=self.schema,
            table=table,
            method=self.method,
            **self.extra,
        )

    def name(self, table: str) -> str:
        """``table`` qualified with this test's schema."""
        return f"{self.schema}.{table}" if self.schema else table

    def connect(self, *, autocommit: bool = False) -> Any:
        """A connection of the database's own driver (never the code under test's)."""
        if self.kind == "duckdb":
            import duckdb

            return duckdb.connect(self.location)
        if self.kind == "sqlite":
            return sqlite3.connect(self.location, isolation_level=None if autocommit else "DEFERRED")
        if self.kind == "mariadb":
            import MySQLdb

            return MySQLdb.connect(
                **MARIADB, database=self.location, charset="utf8mb4", autocommit=autocommit
            )
        import psycopg

        return psycopg.connect(postgres_dsn(self.location), autocommit=autocommit)

    def _marked(self, sql: str) -> str:
        """``sql`` written with ``%s`` markers, in this driver's style."""
        return sql.replace("%s", "?") if self.kind in ("duckdb", "sqlite") else sql

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (``%s`` markers on every driver), on a connection closed at once."""
        return self._run(sql, params, fetch=True)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run and commit one statement (several, without ``params``, where the driver allows)."""
        self._run(sql, params, fetch=False)

    def _run(self, sql: str, params: Sequence[Any] | None, *, fetch: bool) -> list[tuple[Any, ...]]:
        with closing(self.connect()) as conn:
            cur = conn.cursor()
            if params is None:
                cur.execute(sql)
            else:
                cur.execute(self._marked(sql), list(params))
            rows = [tuple(row) for row in cur.fetchall()] if fetch else []
            conn.commit()
            return rows

    def replace_table(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, long_text: bool = False
    ) -> None:
        """(Re)create ``table`` as text columns of ``rows``, in bulk (``long_text``: over 255 chars)."""
        name = self.name(table)
        with closing(self.connect()) as conn:
            cur = conn.cursor()
            cur.execute(f"DROP TABLE IF EXISTS {name}")
            text = ("TEXT" if long_text else "VARCHAR(255)") if self.kind == "mariadb" else "VARCHAR"
            cur.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {text}' for c in columns)})")
            if rows and self.kind == "duckdb":
                import pyarrow as pa

                data = pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)})
                conn.register("rows_in", data)
                conn.execute(f"INSERT INTO {name} SELECT * FROM rows_in")
            elif rows and self.kind.startswith("postgres"):
                with cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            elif rows:
                marks = ", ".join("?" if self.kind == "sqlite" else "%s" for _ in columns)
                cur.executemany(f"INSERT INTO {name} VALUES ({marks})", [list(r) for r in rows])
            conn.commit()

    # --- what a test asks the database: one helper per question ------------------------------------

    def tables(self) -> list[str]:
        """The tables of this test's schema (the connection's own when it has none), sorted."""
        return self._tables_in(self.schema)

    def _tables_in(self, schema: str | None) -> list[str]:
        if self.kind == "sqlite":
            return sorted(r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'"))
        where, params = self._in_schema(schema)
        rows = self.query(f"SELECT table_name FROM information_schema.tables WHERE {where}", params)
        return sorted(str(r[0]) for r in rows)

    def _in_schema(self, schema: str | None) -> tuple[str, list[Any]]:
        """The ``information_schema`` condition for ``schema`` (``None``: the connection's own)."""
        if schema:
            return "table_schema = %s", [schema]
        return f"table_schema = {'DATABASE()' if self.kind == 'mariadb' else 'current_schema()'}", []

    def exists(self, table: str | None = None) -> bool:
        """Whether ``table`` (named as in SQL; the export table by default) exists."""
        schema, _, bare = (table or self.table).rpartition(".")
        return bare in self._tables_in(schema or None)

    def count(self, table: str | None = None, where: str = "", params: Sequence[Any] | None = None) -> int:
        """How many rows ``table`` (the export table by default) holds, ``where`` they match."""
        condition = f" WHERE {where}" if where else ""
        ((found,),) = self.query(f"SELECT COUNT(*) FROM {table or self.table}{condition}", params)
        return int(found)

    def column_facts(self, table: str | None = None, *facts: str) -> list[tuple[Any, ...]]:
        """``(column_name, *facts)`` of each column of ``table`` in order, ``facts`` being columns of
        ``information_schema.columns`` (``data_type``, ``column_default``...)."""
        schema, _, bare = (table or self.table).rpartition(".")
        if self.kind == "sqlite":
            if facts:
                raise ValueError(f"SQLite has no information_schema to read {facts} from")
            return self.query("SELECT name FROM pragma_table_info(%s) ORDER BY cid", [bare])
        where, params = self._in_schema(schema or None)
        return self.query(
            f"SELECT {', '.join(['column_name', *facts])} FROM information_schema.columns "
            f"WHERE {where} AND table_name = %s ORDER BY ordinal_position",
            [*params, bare],
        )

    def columns(self, table: str | None = None) -> list[str]:
        """The column names of ``table`` (the export table by default), in order."""
        return [str(row[0]) for row in self.column_facts(table)]

    # --- the export table and its ledger ------------------------------------------------------------

    def operator_kwargs(self, **extra: Any) -> dict[str, Any]:
        """The arguments that point an ``ExecutionCsvToSqlOperator`` at the export table."""
        return {"sql_conn_id": self.conn_id, "table": self.table, "method": self.method, **extra}

    def operator(self, **kwargs: Any) -> ExecutionCsvToSqlOperator:
        kwargs.setdefault("task_id", f"load_{uuid.uuid4().hex[:6]}")
        op = ExecutionCsvToSqlOperator(**self.operator_kwargs(**kwargs))
        if self.hook is not None:
            op.get_db_hook = lambda: self.hook  # type: ignore[method-assign]
        return op

    def contents(
        self, export_type: str = "TACTIC_PERFORMANCE", table: str | None = None
    ) -> dict[tuple[str, ...], tuple[Any, ...]]:
        """``table`` (the export table by default) keyed by natural key; a repeated key fails."""
        with closing(self.connect()) as conn:
            return table_contents(conn.cursor(), table or self.table, export_type)

    def rows(self) -> list[tuple[Any, ...]]:
        """Every row with every data column and the execution id, sorted: duplicates stay visible."""
        if not self.exists():
            return []
        raw = self.query(f"SELECT {', '.join([*TACTIC_COLUMNS, '_execution_id'])} FROM {self.table}")
        out = [
            tuple(normalise(c, v) for c, v in zip(TACTIC_COLUMNS, r[:-1], strict=True)) + (r[-1],)
            for r in raw
        ]
        return sorted(out, key=repr)

    def ledger_rows(self) -> list[tuple[Any, ...]]:
        """The ledger's (execution, digest, loaded, deleted, rejected), oldest first; none without one."""
        if not self.exists(self.ledger):
            return []
        return self.query(
            f"SELECT execution_id, sha256, rows_loaded, rows_deleted, rows_rejected FROM {self.ledger} "
            "ORDER BY loaded_at, rows_loaded"
        )


@contextmanager
def open_warehouse(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suite: Suite = LOADS
) -> Iterator[Warehouse]:
    """A new warehouse of ``kind`` for ``suite``, as its Airflow connection; skips when the server is down."""
    conn_id = suite.connection(kind)
    if kind in ("duckdb", "sqlite"):
        yield Warehouse(kind, conn_id, tmp_path / f"warehouse.{kind}").use(monkeypatch)
    elif kind == "mariadb":
        with mariadb_database(suite) as database:
            yield Warehouse(kind, conn_id, suite.mariadb_home or database, schema=database).use(monkeypatch)
    else:
        with postgres_schema(suite) as schema:
            yield Warehouse(kind, conn_id, suite.database, schema=schema).use(monkeypatch)


def make_warehouse(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: Any, suite: Suite = LOADS
) -> Warehouse:
    """:func:`open_warehouse` for the rest of the test (``request``'s)."""
    stack = ExitStack()
    request.addfinalizer(stack.close)
    return stack.enter_context(open_warehouse(kind, tmp_path, monkeypatch, suite))


@pytest.fixture(params=["duckdb", "postgres", "postgres_generic", "sqlite", "mariadb"])
def warehouse(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    """A loader test's warehouse, of every kind."""
    with open_warehouse(request.param, tmp_path, monkeypatch) as found:
        yield found


@pytest.fixture(params=["duckdb", "postgres"])
def native_warehouse(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Warehouse]:
    """A loader test's warehouse with a native bulk path."""
    with open_warehouse(request.param, tmp_path, monkeypatch) as found:
        yield found


@pytest.fixture(scope="module")
def pg_conn() -> Iterator[Any]:
    """An autocommit connection to the test PostgreSQL, for checks that need no table of their own."""
    require_postgres()
    import psycopg

    with psycopg.connect(postgres_dsn(), autocommit=True) as conn:
        yield conn
