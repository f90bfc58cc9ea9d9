"""Loading export files into SQL warehouses: schemas, per-warehouse dialects, the ledger, rejects.

:func:`loader_for` picks the fastest path the hook supports through its dialect
(:mod:`abm_provider.warehouse.dialects`): DuckDB's own ``read_csv``, PostgreSQL's ``COPY FROM STDIN``,
or the portable chunked ``executemany`` path for any other common-sql ``DbApiHook``. The flow is
:mod:`.flow`. Nothing here imports the emulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from abm_provider.common.arguments import check_choice
from abm_provider.common.rejects import TooManyRejects
from abm_provider.warehouse.checks import SchemaMismatch
from abm_provider.warehouse.dialects import Dialect, dialect_for, dialect_name
from abm_provider.warehouse.flow import WarehouseLoader
from abm_provider.warehouse.load import LoadRequest, LoadResult

Method = Literal["auto", "native", "generic"]
#: The loader's paths: the warehouse's bulk path when it has one, that path or a failure, or chunked
#: ``executemany`` everywhere.
METHODS: tuple[Method, ...] = ("auto", "native", "generic")

__all__ = [
    "METHODS",
    "Dialect",
    "LoadRequest",
    "LoadResult",
    "Method",
    "SchemaMismatch",
    "TooManyRejects",
    "WarehouseLoader",
    "dialect_for",
    "dialect_of",
    "loader_for",
]


def dialect_of(hook: Any) -> str:
    """The warehouse kind behind a common-sql hook: a registered dialect's name, or ``generic``."""
    return dialect_name(hook)


def loader_for(
    hook: Any,
    *,
    method: Method = "auto",
    dialect_options: Mapping[str, Any] | None = None,
    chunk_rows: int = 10_000,
    log: Any = None,
) -> WarehouseLoader:
    """Return the loader for ``hook``: its native bulk path, or the generic one when asked or unknown.

    ``dialect_options``: the warehouse's own settings (DuckDB's ``memory_limit`` and ``threads``...),
    over the connection's extra ``dialect_options``; an option the warehouse's dialect does not have
    fails naming it (:mod:`abm_provider.warehouse.dialects.options`).
    """
    check_choice(method, "method", METHODS)
    dialect = dialect_for(
        hook, native=method != "generic", options=dialect_options, chunk_rows=chunk_rows, log=log
    )
    if method == "native" and dialect.name == "generic":
        raise ValueError(f"{type(hook).__name__} has no native bulk path; use method='generic' or 'auto'")
    return WarehouseLoader(dialect)
