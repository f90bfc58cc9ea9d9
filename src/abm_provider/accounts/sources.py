"""Where accounts come from: an iterable, an in-memory table, a CSV or Parquet file, or a SQL query.

Every source is a generator of :class:`~abm_provider.accounts.validation.SourceRow` that reads in bounded
chunks, so the add/remove run and the list sync keep memory flat whatever the size of the source.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Literal

from airflow.sdk import ObjectStoragePath

from abm_provider.accounts.validation import MalformedRecord, SourceRow
from abm_provider.common.arguments import check_choice
from abm_provider.common.paths import as_storage_path, is_local
from abm_provider.warehouse.connections import sql_hook
from abm_provider.warehouse.dialects import dialect_for
from abm_provider.warehouse.schema import TableName

if TYPE_CHECKING:
    from abm_provider.warehouse.dialects import Dialect

FileFormat = Literal["csv", "parquet"]
#: The file formats an accounts file may have, as ``file_format`` names them.
FILE_FORMATS: tuple[FileFormat, ...] = ("csv", "parquet")

_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4", ".snappy")


class OpenedSource:
    """A source that has been opened: its column names (when it has a fixed set) and its rows.

    ``columns`` lets the operator check the column mapping before sending anything, so a wrong
    ``column_map`` fails in the first second rather than after producing a million rejects.
    """

    def __init__(self, columns: Sequence[str] | None, rows: Iterator[SourceRow]) -> None:
        self.columns = list(columns) if columns is not None else None
        self.rows = rows


def detect_file_format(path: str, file_format: str | None = None) -> FileFormat:
    """Pick CSV or Parquet from an explicit setting or the file name (compression suffix ignored)."""
    if file_format is not None:
        return check_choice(str(file_format).lower(), "file_format", FILE_FORMATS)
    name = path.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith((".csv", ".txt")):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    raise ValueError(f"Cannot tell the format of {path!r} from its name; set file_format='csv' or 'parquet'")


class IterableSource:
    """Rows from any iterable of mappings (a list, a generator, an XCom value).

    The iterable is consumed once, lazily, so a generator source costs no more memory than one row.
    """

    description = "iterable"

    def __init__(self, accounts: Iterable[Any]) -> None:
        if isinstance(accounts, (str, bytes, Mapping)):
            raise TypeError(
                "accounts must be an iterable of account mappings, not a single "
                f"{type(accounts).__name__}; wrap one account in a list"
            )
        self.accounts = accounts

    @contextmanager
    def open(self) -> Iterator[OpenedSource]:
        """Open the iterable; it has no fixed column set, so each row is checked on its own."""
        yield OpenedSource(None, self._rows())

    def _rows(self) -> Iterator[SourceRow]:
        for number, data in enumerate(self.accounts, start=1):
            yield SourceRow(number, None, data)


def is_table(value: Any) -> bool:
    """Whether ``value`` is an in-memory table :class:`TableSource` reads (without importing pandas).

    Checked before "is it iterable", because iterating a DataFrame yields its column names.
    """
    module = type(value).__module__
    if module.startswith("pandas") and hasattr(value, "iloc") and hasattr(value, "columns"):
        return True
    arrow_batches = hasattr(value, "to_batches") or hasattr(value, "read_next_batch")
    return module.startswith("pyarrow") and hasattr(value, "schema") and arrow_batches


class TableSource:
    """Rows of an in-memory table: a pyarrow ``Table`` or ``RecordBatchReader``, or a pandas DataFrame.

    Read one batch at a time: Arrow record batches are zero-copy slices of the table, and a DataFrame
    is taken ``read_batch_size`` rows at a time (``iloc`` slices are views) through Arrow, so only one
    batch is ever turned into Python dicts, and missing values (``NaN``, ``None``, ``pd.NA``) become
    ``None`` as in a Parquet file. pandas is never imported here: a DataFrame brings its own.
    """

    description = "table"

    def __init__(self, table: Any, *, read_batch_size: int = 1000) -> None:
        if not is_table(table):
            raise TypeError(f"expected a pyarrow Table or a pandas DataFrame, got {type(table).__name__}")
        self.table = table
        self.read_batch_size = read_batch_size

    @contextmanager
    def open(self) -> Iterator[OpenedSource]:
        """Open the table: its column names are known, so a wrong ``column_map`` fails at once."""
        columns = [str(name) for name in (self.table.columns if self._is_pandas else self.table.schema.names)]
        yield OpenedSource(columns, self._rows())

    @property
    def _is_pandas(self) -> bool:
        return type(self.table).__module__.startswith("pandas")

    def _batches(self) -> Iterator[Any]:
        import pyarrow as pa

        if not self._is_pandas:
            # A Table's batches, or a reader's as they arrive; slices are views of the batch.
            batches = self.table.to_batches() if hasattr(self.table, "to_batches") else self.table
            for batch in batches:
                for start in range(0, batch.num_rows, self.read_batch_size):
                    yield batch.slice(start, self.read_batch_size)
            return
        frame = self.table
        for start in range(0, len(frame), self.read_batch_size):
            chunk = frame.iloc[start : start + self.read_batch_size]
            yield pa.RecordBatch.from_pandas(chunk, preserve_index=False)

    def _rows(self) -> Iterator[SourceRow]:
        number = 0
        for batch in self._batches():
            for data in batch.to_pylist():
                number += 1
                yield SourceRow(number, None, data)


class CsvSource:
    """Rows of a CSV file (header row required), local or on any ``ObjectStoragePath`` store.

    Read with the standard library's streaming reader over a text stream rather than pyarrow: every
    value stays a string (no type inference turning ids like ``00123`` into numbers), a malformed
    record becomes one reject with its exact physical line number instead of aborting the read, and
    a quoted newline inside a name is handled. Parsing runs far faster than the API accepts accounts,
    and memory is one record plus the stream buffer.
    """

    description = "CSV file"

    def __init__(
        self,
        path: str | os.PathLike[str] | ObjectStoragePath,
        *,
        delimiter: str = ",",
        encoding: str = "utf-8-sig",
        compression: str | None = "infer",
    ) -> None:
        self.path = as_storage_path(path)
        self.delimiter = delimiter
        self.encoding = encoding
        self.compression = compression

    @contextmanager
    def open(self) -> Iterator[OpenedSource]:
        """Open the file and read its header; the rows are read as they are consumed."""
        raw = self.path.open("rb", compression=self.compression)
        try:
            text = io.TextIOWrapper(raw, encoding=self.encoding, newline="")
            reader = csv.reader(text, delimiter=self.delimiter, strict=False)
            try:
                header = next(reader)
            except StopIteration:
                raise ValueError(f"{self.path} is empty: a CSV accounts file needs a header row") from None
            except UnicodeDecodeError as err:
                raise ValueError(f"{self.path} is not {self.encoding} text: {err}") from err
            header = [h.strip() for h in header]
            duplicated = sorted({h for h in header if header.count(h) > 1})
            if duplicated:
                raise ValueError(f"{self.path} has duplicate column names {duplicated}")
            yield OpenedSource(header, self._rows(reader, header))
        finally:
            raw.close()

    def _rows(self, reader: Any, header: list[str]) -> Iterator[SourceRow]:
        width = len(header)
        number = 0
        last_line = reader.line_num
        try:
            for values in reader:
                start_line = last_line + 1
                last_line = reader.line_num
                if not values:
                    continue  # a blank line holds no record
                number += 1
                if len(values) != width:
                    yield SourceRow(number, start_line, MalformedRecord(values, width))
                    continue
                yield SourceRow(number, start_line, dict(zip(header, values, strict=True)))
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{self.path} is not {self.encoding} text after line {last_line}: {err}"
            ) from err
        except csv.Error as err:
            raise ValueError(f"{self.path} line {reader.line_num}: unreadable CSV: {err}") from err


class ParquetSource:
    """Rows of a Parquet file, read one record batch at a time.

    Memory is bounded by one record batch plus the column chunks of the row group being decoded, so
    files written with very large row groups cost more than their batch size suggests; it does not
    grow with the number of row groups.
    """

    description = "Parquet file"

    def __init__(
        self, path: str | os.PathLike[str] | ObjectStoragePath, *, read_batch_size: int = 1000
    ) -> None:
        self.path = as_storage_path(path)
        self.read_batch_size = read_batch_size

    @contextmanager
    def open(self) -> Iterator[OpenedSource]:
        """Open the file and read its schema; record batches are decoded as rows are consumed."""
        import pyarrow.parquet as pq

        handle: Any = None
        if is_local(self.path):
            source: Any = self.path.path
        else:
            handle = self.path.open("rb")
            source = handle
        try:
            parquet = pq.ParquetFile(source, buffer_size=1 << 20)
            yield OpenedSource(parquet.schema_arrow.names, self._rows(parquet))
        finally:
            if handle is not None:
                handle.close()

    def _rows(self, parquet: Any) -> Iterator[SourceRow]:
        number = 0
        try:
            # One reader per row group: a single reader over the whole file keeps buffers of every row
            # group it has passed (measured: arrow memory grows about 130 KB per row group).
            for row_group in range(parquet.num_row_groups):
                for batch in parquet.iter_batches(batch_size=self.read_batch_size, row_groups=[row_group]):
                    for data in batch.to_pylist():
                        number += 1
                        yield SourceRow(number, None, data)
        finally:
            parquet.close()


@dataclass(frozen=True)
class WarehouseQuery:
    """A SQL source as its own connection runs it: the user's statement and parameters, as given.

    ``is_table``: the statement is the provider's own ``SELECT`` of a table, not the user's text.
    ``numbered``: its first column is already each row's record number (a work table of the audience
    sync, whose rows keep their numbers in the user's source), so it is read in place, not numbered.
    ``rows``: how many rows it has, where that is known already (the stager then does not count them).
    """

    text: str
    parameters: Mapping[str, Any] | Sequence[Any] | None
    is_table: bool = False
    numbered: bool = False
    rows: int | None = None


@dataclass
class SqlSource:
    """Rows of a SQL query (``sql``), or of a whole ``table``, run through any common-sql ``DbApiHook``
    connection.

    Rows are fetched with ``fetchmany`` on the connection's dialect's streaming cursor: a server-side
    cursor where the driver has one (PostgreSQL named cursors, MySQL ``SSCursor``), DuckDB's own
    connection, which fetches in chunks, and a plain cursor elsewhere. A plain client-side cursor on
    PostgreSQL would copy the whole result into the worker on ``execute``.
    """

    description = "SQL query"

    sql: str | None
    sql_conn_id: str
    _: KW_ONLY
    table: TableName | None = None
    parameters: Mapping[str, Any] | Sequence[Any] | None = None
    hook_params: Mapping[str, Any] | None = None
    fetch_size: int = 1000

    def __post_init__(self) -> None:
        if (self.sql is None) == (self.table is None):
            raise ValueError("SqlSource takes a query (sql) or a table, not both and not neither")

    def query_on(self, conn_id: str, dialect: Dialect) -> WarehouseQuery | None:
        """The source as a query that connection ``conn_id`` (spoken as ``dialect``) runs itself.

        ``None`` when it must be read through its own connection: another connection, or hook
        parameters that may change what the query sees. The user's parameters go with the query.
        """
        if conn_id != self.sql_conn_id or self.hook_params:
            return None
        if self.table is not None:
            return WarehouseQuery(f"SELECT * FROM {dialect.table_sql(self.table)}", None, is_table=True)
        return WarehouseQuery(str(self.sql), self.parameters)

    def get_hook(self) -> Any:
        """Resolve the connection to its provider's hook, which must be a common-sql ``DbApiHook``."""
        return sql_hook(self.sql_conn_id, "sql_conn_id", self.hook_params)

    @contextmanager
    def open(self) -> Iterator[OpenedSource]:
        """Run the query; the first chunk is fetched here because named cursors describe only then."""
        hook = self.get_hook()
        conn = hook.get_conn()
        cursor: Any = None
        try:
            dialect = dialect_for(hook)
            # A whole table is read with the name quoted as its warehouse quotes (MySQL reads "x" as text).
            query = self.sql if self.table is None else f"SELECT * FROM {dialect.table_sql(self.table)}"
            cursor = dialect.streaming_cursor(conn)
            if self.parameters:
                cursor.execute(query, self.parameters)
            else:
                cursor.execute(query)
            if cursor.description is None and not _named(cursor):
                raise ValueError("The sql query returns no result set; it must be a SELECT of accounts")
            first = cursor.fetchmany(self.fetch_size)
            if cursor.description is None:
                raise ValueError("The sql query returns no result set; it must be a SELECT of accounts")
            columns = [d[0] for d in cursor.description]
            yield OpenedSource(columns, self._rows(cursor, columns, first))
        finally:
            if cursor is not None:
                cursor.close()
            _end_read_transaction(conn)
            conn.close()

    def _rows(self, cursor: Any, columns: list[str], first: Sequence[Any]) -> Iterator[SourceRow]:
        number = 0
        chunk = first
        while chunk:
            for values in chunk:
                number += 1
                yield SourceRow(number, None, dict(zip(columns, values, strict=True)))
            chunk = cursor.fetchmany(self.fetch_size)


def _named(cursor: Any) -> bool:
    return bool(getattr(cursor, "name", None)) and type(cursor).__module__.startswith("psycopg")


def _end_read_transaction(conn: Any) -> None:
    """Roll back the read-only transaction a server-side cursor needed; nothing was written in it."""
    rollback = getattr(conn, "rollback", None)
    if rollback is None:
        return
    # A driver with no open transaction may refuse; the connection is closed right after anyway.
    with suppress(Exception):
        rollback()


def open_file_source(
    path: str | os.PathLike[str] | ObjectStoragePath,
    file_format: str | None = None,
    *,
    read_batch_size: int = 1000,
) -> CsvSource | ParquetSource:
    """Choose the CSV or Parquet reader for ``path``."""
    storage_path = as_storage_path(path)
    fmt = detect_file_format(str(storage_path), file_format)
    if fmt == "csv":
        return CsvSource(storage_path)
    return ParquetSource(storage_path, read_batch_size=read_batch_size)


AccountSource = IterableSource | TableSource | CsvSource | ParquetSource | SqlSource
