"""Account sources, row validation and batching for the account-list operators.

The add/remove operators must keep memory flat whatever the size of the source, so everything here
is a generator: a source yields one row at a time (reading files and query results in bounded
chunks), the validator turns a row into the request payload or a reason, and :func:`iter_batches`
groups valid accounts into batches of at most the API limit while invalid rows go straight to the
rejects writer (:mod:`abm_provider.common.rejects`). Nothing here talks to the API; the operators own that,
which keeps this module testable without a server. The state folder helpers at the end place the
operators' outputs (rejects, downloads).
"""

from __future__ import annotations

import csv
import io
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from airflow.sdk import ObjectStoragePath

from abm_provider.common.paths import as_storage_path, is_local
from abm_provider.common.sql import sql_hook

#: Fields of an account in the Account Lists v2 requests, in request order.
API_FIELDS: tuple[str, ...] = ("id", "name", "crmOrgId", "crmType")
#: Fields a remove request carries (the API takes no name there).
REMOVE_FIELDS: tuple[str, ...] = ("id", "crmOrgId", "crmType")
#: What the service assumes when a request leaves ``crmType`` out.
DEFAULT_CRM_TYPE = "SALESFORCE"
#: The only crmType the service documents; anything else would be refused or silently not found.
KNOWN_CRM_TYPES: frozenset[str] = frozenset({"SALESFORCE"})
#: The API refuses more than this many accounts in one add or remove request.
MAX_BATCH_SIZE = 1000
#: Longest id/name/crmOrgId accepted. Salesforce ids are 15 or 18 characters; the limit is generous
#: so valid ids of other CRMs pass, while a wrong delimiter (a whole line in one field) is caught here
#: instead of failing a whole 1000-account request.
DEFAULT_MAX_FIELD_LENGTH = 255

FileFormat = Literal["csv", "parquet"]

_ID_FORBIDDEN = re.compile(r"[\s\x00-\x1f\x7f]")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4", ".snappy")


class SourceRow(NamedTuple):
    """One row as read from a source, with where it came from so a reject can point back at it.

    ``row_number`` is 1-based among data rows (a CSV header is not counted; it is the rejects file's
    ``record``). ``line`` is the physical
    line a CSV record starts on (records may span lines when a quoted value holds a newline); it is
    ``None`` for sources without lines. ``data`` is the row exactly as read, normally a mapping of
    source column names to values. A named tuple because one is built per source row: it is several
    times cheaper to make than a frozen dataclass, and as immutable.
    """

    row_number: int
    line: int | None
    data: Any


@dataclass(frozen=True, slots=True)
class InvalidRow:
    """A row that is not sent, with the reason a person can act on."""

    row: SourceRow
    reason: str


class OpenedSource:
    """A source that has been opened: its column names (when it has a fixed set) and its rows.

    ``columns`` lets the operator check the column mapping before sending anything, so a wrong
    ``column_map`` fails in the first second rather than after producing a million rejects.
    """

    def __init__(self, columns: Sequence[str] | None, rows: Iterator[SourceRow]) -> None:
        self.columns = list(columns) if columns is not None else None
        self.rows = rows


def normalise_column_map(column_map: Mapping[str, str] | None) -> dict[str, str]:
    """Merge a user's ``{api_field: source_column}`` map onto the identity map, rejecting typos early.

    A misspelt API field (``"crmorgid"``) would otherwise be ignored and every account sent without
    that field, so unknown keys are an error at DAG parse time.
    """
    merged = {name: name for name in API_FIELDS}
    if not column_map:
        return merged
    unknown = sorted(set(column_map) - set(API_FIELDS))
    if unknown:
        raise ValueError(f"column_map has unknown keys {unknown}; its keys must be among {list(API_FIELDS)}")
    for api_field, column in column_map.items():
        if not isinstance(column, str) or not column:
            raise ValueError(f"column_map[{api_field!r}] must be a non-empty column name, got {column!r}")
        merged[api_field] = column
    return merged


class AccountValidator:
    """Turns a source row into the account payload for a request, or a reason it cannot be sent.

    The service answers ``400`` for a whole request when one account in it is malformed, which would
    fail 999 good accounts with it, and it reports an unknown id as "not found" only when the id is
    at least well formed. So every row is checked here first, and each problem gets a reason a person
    can fix the source from.
    """

    def __init__(
        self,
        column_map: Mapping[str, str] | None = None,
        *,
        fields: Sequence[str] = API_FIELDS,
        default_crm_type: str | None = None,
        crm_types: Iterable[str] = KNOWN_CRM_TYPES,
        max_field_length: int = DEFAULT_MAX_FIELD_LENGTH,
        default_crm_org_id: str | None = None,
    ) -> None:
        self.column_map = normalise_column_map(column_map)
        if default_crm_org_id is not None and not default_crm_org_id.strip():
            raise ValueError("default_crm_org_id must be a non-empty string or None")
        self.default_crm_org_id = default_crm_org_id.strip() if default_crm_org_id else None
        self.fields = tuple(fields)
        self.crm_types = frozenset(crm_types)
        if default_crm_type is not None and default_crm_type not in self.crm_types:
            raise ValueError(
                f"default_crm_type {default_crm_type!r} is not a known crmType {sorted(self.crm_types)}"
            )
        if max_field_length < 1:
            raise ValueError("max_field_length must be at least 1")
        self.default_crm_type = default_crm_type
        self.max_field_length = max_field_length
        self.id_column = self.column_map["id"]
        self._optional = [(f, self.column_map[f]) for f in ("name", "crmOrgId") if f in self.fields]
        # Only ``id`` is required by the service: it fills a missing crmOrgId with the customer's CRM
        # org and a missing crmType with SALESFORCE. ``default_crm_org_id`` still fills a missing org
        # here, for callers who key their own records by the org they sent.
        self._org_default = self.default_crm_org_id if "crmOrgId" in self.fields else None
        self._crm_type_column = self.column_map["crmType"] if "crmType" in self.fields else None

    def missing_columns(self, columns: Sequence[str]) -> list[str]:
        """Source columns the mapping needs that a source with a fixed column set lacks.

        Only the id column is required; the others are optional in the API, but a mapping that names
        a column the source does not have is almost always a typo, so those are reported too.
        """
        present = set(columns)
        needed = [self.column_map[f] for f in self.fields]
        explicit = [c for f, c in self.column_map.items() if f in self.fields and c != f]
        return [
            c for c in dict.fromkeys(needed) if c not in present and (c == self.id_column or c in explicit)
        ]

    def check_columns(self, columns: Sequence[str] | None, description: str) -> None:
        """Raise ``ValueError`` naming the missing columns and the fix, before anything is sent."""
        missing = self.missing_columns(columns) if columns is not None else []
        if missing:
            raise ValueError(
                f"The {description} has no column {missing} (columns: {list(columns or [])}); "
                "set column_map, e.g. column_map={'id': '<your id column>'}"
            )

    def validate(self, data: Any) -> tuple[dict[str, str] | None, str | None]:
        """Return ``(account, None)`` for a sendable row, or ``(None, reason)``."""
        # ``type(x) is ...`` first: this runs for every row, and ABC isinstance checks cost several
        # times more than the rest of the validation together.
        if type(data) is not dict:
            if isinstance(data, _MalformedRecord):
                return None, data.reason()
            if not isinstance(data, Mapping):
                return None, f"row is not a mapping of column names to values (got {type(data).__name__})"
        raw_id = data.get(self.id_column)
        if raw_id is None:
            if self.id_column not in data:
                return None, f"missing id (no column {self.id_column!r})"
            return None, "missing id (null)"
        if type(raw_id) is not str and not isinstance(raw_id, str):
            return None, f"id must be a string, got {type(raw_id).__name__} {raw_id!r}"
        account_id = raw_id.strip()
        if not account_id:
            return None, "empty id"
        if len(account_id) > self.max_field_length:
            return (
                None,
                f"id is {len(account_id)} characters, over the limit of {self.max_field_length}",
            )
        # isalnum() is a fast, exact pass for the usual ids (no whitespace or control character can
        # be alphanumeric); the pattern decides the rest.
        if not account_id.isalnum() and _ID_FORBIDDEN.search(account_id):
            return None, "id contains whitespace or control characters"
        account = {"id": account_id}
        for api_field, column in self._optional:
            value = data.get(column)
            if value is None:
                continue
            if type(value) is not str and not isinstance(value, str):
                return None, f"{api_field} must be a string, got {type(value).__name__} {value!r}"
            value = value.strip()
            if not value:
                continue
            if len(value) > self.max_field_length:
                return None, (
                    f"{api_field} is {len(value)} characters, over the limit of {self.max_field_length}"
                )
            # A printable string holds no control character; only the others need the pattern.
            if not value.isprintable() and _CONTROL_CHARS.search(value):
                return None, f"{api_field} contains control characters"
            account[api_field] = value
        if self._crm_type_column is not None:
            crm_type = data.get(self._crm_type_column)
            if crm_type is None or (isinstance(crm_type, str) and not crm_type.strip()):
                if self.default_crm_type is not None:
                    account["crmType"] = self.default_crm_type
            elif not isinstance(crm_type, str):
                return None, f"crmType must be a string, got {type(crm_type).__name__} {crm_type!r}"
            elif crm_type.strip() not in self.crm_types:
                return None, f"unknown crmType {crm_type!r} (expected one of {sorted(self.crm_types)})"
            else:
                account["crmType"] = crm_type.strip()
        if self._org_default is not None and "crmOrgId" not in account:
            account["crmOrgId"] = self._org_default
        return account, None


def check_batch_size(batch_size: object) -> int:
    """Return ``batch_size`` if it is a whole number the API accepts (1 to 1000), else raise."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValueError(f"batch_size must be a whole number, got {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be between 1 and {MAX_BATCH_SIZE}, got {batch_size}")
    return batch_size


def iter_batches(
    rows: Iterable[SourceRow],
    validator: AccountValidator,
    batch_size: int,
    on_invalid: Callable[[InvalidRow], None],
) -> Iterator[list[tuple[dict[str, str], SourceRow]]]:
    """Yield lists of at most ``batch_size`` valid accounts, each with the row it came from.

    Invalid rows are handed to ``on_invalid`` as they are met (so they reach the rejects file in
    source order and the caller can stop early), never batched. Keeping the source row next to its
    account is what lets a "not found" answer be written back with the original row and its number.
    """
    check_batch_size(batch_size)
    batch: list[tuple[dict[str, str], SourceRow]] = []
    validate = validator.validate
    for row in rows:
        account, reason = validate(row.data)
        if account is None:
            on_invalid(InvalidRow(row, reason or "invalid"))
            continue
        batch.append((account, row))
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


# --- sources -------------------------------------------------------------------------------------


def detect_file_format(path: str, file_format: str | None = None) -> FileFormat:
    """Pick CSV or Parquet from an explicit setting or the file name (compression suffix ignored)."""
    if file_format is not None:
        lowered = file_format.lower()
        if lowered not in ("csv", "parquet"):
            raise ValueError(f"file_format must be 'csv' or 'parquet', got {file_format!r}")
        return "csv" if lowered == "csv" else "parquet"
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
                    yield SourceRow(number, start_line, _MalformedRecord(values, width))
                    continue
                yield SourceRow(number, start_line, dict(zip(header, values, strict=True)))
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{self.path} is not {self.encoding} text after line {last_line}: {err}"
            ) from err
        except csv.Error as err:
            raise ValueError(f"{self.path} line {reader.line_num}: unreadable CSV: {err}") from err


class _MalformedRecord(list):  # type: ignore[type-arg]
    """The fields of a CSV record with the wrong number of fields, kept as read for the rejects file.

    A list subclass so the rejects writer records the original fields as a JSON array, while the
    validator recognises it and uses :meth:`reason`.
    """

    def __init__(self, values: list[str], expected: int) -> None:
        super().__init__(values)
        self.expected = expected

    def reason(self) -> str:
        """Say how the record is malformed, which is what the reader of the rejects file needs."""
        return f"malformed CSV record: expected {self.expected} fields, got {len(self)}"


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


class SqlSource:
    """Rows of a SQL query run through any common-sql ``DbApiHook`` connection.

    Rows are fetched with ``fetchmany`` on a server-side cursor where the driver has one (PostgreSQL
    named cursors, MySQL ``SSCursor``); other drivers, DuckDB included, stream results through a
    plain cursor's ``fetchmany``. A plain client-side cursor on PostgreSQL would copy the whole result
    into the worker on ``execute``.
    """

    description = "SQL query"

    def __init__(
        self,
        sql: str,
        sql_conn_id: str,
        *,
        parameters: Mapping[str, Any] | Sequence[Any] | None = None,
        hook_params: Mapping[str, Any] | None = None,
        fetch_size: int = 1000,
    ) -> None:
        self.sql = sql
        self.sql_conn_id = sql_conn_id
        self.parameters = parameters
        self.hook_params = dict(hook_params or {})
        self.fetch_size = fetch_size

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
            cursor = _streaming_cursor(conn)
            if self.parameters:
                cursor.execute(self.sql, self.parameters)
            else:
                cursor.execute(self.sql)
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


def _streaming_cursor(conn: Any) -> Any:
    """A cursor that keeps the result on the server when the driver supports it."""
    module = type(conn).__module__
    name = f"abm_accounts_{uuid.uuid4().hex[:12]}"
    if module.startswith("psycopg2") or module.startswith("psycopg"):
        return conn.cursor(name=name)
    if module.startswith("MySQLdb"):
        from MySQLdb.cursors import SSCursor  # type: ignore[import-not-found]

        return conn.cursor(SSCursor)
    if module.startswith("pymysql"):
        from pymysql.cursors import SSCursor as PyMySQLSSCursor  # type: ignore[import-not-found]

        return conn.cursor(PyMySQLSSCursor)
    return conn.cursor()


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
