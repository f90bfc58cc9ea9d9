"""What one load is asked to do (:class:`LoadRequest`) and what it did (:class:`LoadResult`).

The operator resolves its templated arguments into a request; the loader
(:class:`~abm_provider.warehouse.flow.WarehouseLoader`) and the dialects read it, and the result is
the task's XCom.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from abm_provider.common.rejects import Limit
from abm_provider.warehouse.schema import ExportSchema, TableName

OnSchemaChange = Literal["fail", "add_columns"]
#: What a load does with file columns the table lacks: fail, or add them to the table.
ON_SCHEMA_CHANGES: tuple[OnSchemaChange, ...] = ("fail", "add_columns")


class StreamReader(Protocol):
    """One reader of a file that is still arriving (:class:`abm_provider.exports.pipe.BytePipe`)."""

    def read(self, size: int | None = -1) -> bytes: ...

    def read_header(self, limit: int = ...) -> bytes: ...

    def chunks(self) -> Iterator[bytes]: ...

    def detach(self) -> None: ...


class Verified(Protocol):
    """A streamed file once complete and checked."""

    @property
    def sha256(self) -> str: ...

    @property
    def size(self) -> int: ...


class ByteSource(Protocol):
    """A file that is still downloading (:class:`abm_provider.exports.stream.ExportStream`)."""

    def open(self, readers: int) -> Sequence[StreamReader]: ...

    def settle(self) -> Verified: ...


@dataclass(frozen=True)
class LoadRequest:
    """Everything one load needs, already resolved from the operator's (templated) arguments.

    Frozen: a load reads it and never changes it. With a ``stream`` the file at ``path`` is still
    downloading (``sha256`` and ``size`` are then empty): a dialect whose bulk path can read it as it
    arrives does, then :meth:`~abm_provider.warehouse.stream.IncomingFile.wait_for_download` waits for
    the file to be complete and checked, before anything else reads ``path`` and before the commit;
    the digest and size it learns are the load's ``IncomingFile``'s, and its result's.
    """

    path: Path
    source: str
    table: TableName
    export: ExportSchema
    key_columns: tuple[str, ...]
    execution_id: str | None
    sha256: str
    size: int
    rejects_path: Path
    ledger: TableName
    force: bool = False
    on_schema_change: OnSchemaChange = "fail"
    max_rejected: Limit = 0
    stream: ByteSource | None = None
    #: When the execution completed (its ``updateTime``, UTC, naive), which orders loads into one
    #: table: rows an execution wrote are never replaced by an older execution's. ``None``: unknown
    #: (a bare file), and the load replaces what it restates, as every load did before.
    execution_time: dt.datetime | None = None


@dataclass
class LoadResult:
    """The XCom summary of one load: small, JSON-serialisable, no row data."""

    table: str
    export_type: str
    execution_id: str | None
    sha256: str
    bytes: int
    method: str
    rows_loaded: int = 0
    rows_deleted: int = 0
    rows_rejected: int = 0
    rejects_path: str | None = None
    seconds: float = 0.0
    skipped: bool = False
    columns_added: list[str] = field(default_factory=list)
    #: Rows of the file not loaded because a newer execution's row already holds their key: this
    #: execution arrived after a newer one (a backfill, a concurrent run), and the newer figures stay.
    rows_stale: int = 0
    #: The newer executions that hold those keys (at most five), when ``rows_stale`` is not 0.
    newer_executions: list[str] = field(default_factory=list)
    #: The days (``YYYY-MM-DD``) the file holds rows of, oldest first: the partitions the load
    #: replaced. Empty for a skipped load, or an export whose key has no date.
    days: list[str] = field(default_factory=list)

    @property
    def rows_replaced(self) -> int:
        return self.rows_deleted

    def to_xcom(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows_replaced"] = self.rows_deleted
        return data
