"""Loading export files into SQL warehouses: schemas, per-dialect bulk paths, the ledger, rejects.

:func:`loader_for` picks the fastest path the hook supports: DuckDB's own ``read_csv``,
PostgreSQL's ``COPY FROM STDIN``, or the portable chunked ``executemany`` path for any other
common-sql ``DbApiHook``. Nothing here imports the emulator.
"""

from __future__ import annotations

from typing import Any, Literal

from abm_provider.common.rejects import TooManyRejects
from abm_provider.warehouse.base import LoadRequest, LoadResult, SchemaMismatch, WarehouseLoader

Method = Literal["auto", "native", "generic"]

__all__ = [
    "LoadRequest",
    "LoadResult",
    "Method",
    "SchemaMismatch",
    "TooManyRejects",
    "WarehouseLoader",
    "dialect_of",
    "loader_for",
]


def dialect_of(hook: Any) -> str:
    """The warehouse kind behind a common-sql hook: ``duckdb``, ``postgres`` or ``generic``."""
    conn_type = str(getattr(hook, "conn_type", "") or "").lower()
    names = {cls.__name__ for cls in type(hook).__mro__}
    if conn_type == "duckdb" or "DuckDBHook" in names:
        return "duckdb"
    if conn_type in {"postgres", "postgresql"} or "PostgresHook" in names:
        return "postgres"
    return "generic"


def loader_for(
    hook: Any,
    *,
    method: Method = "auto",
    duckdb_memory_limit: str | None = "1GB",
    duckdb_threads: int | None = None,
    chunk_rows: int = 10_000,
    log: Any = None,
) -> WarehouseLoader:
    """Return the loader for ``hook``: its native bulk path, or the generic one when asked or unknown."""
    if method not in ("auto", "native", "generic"):
        raise ValueError(f"method must be 'auto', 'native' or 'generic', got {method!r}")
    dialect = dialect_of(hook) if method != "generic" else "generic"
    if dialect == "duckdb":
        from abm_provider.warehouse.duckdb import DuckDBLoader

        return DuckDBLoader(hook, memory_limit=duckdb_memory_limit, threads=duckdb_threads, log=log)
    if dialect == "postgres":
        from abm_provider.warehouse.postgres import PostgresLoader

        return PostgresLoader(hook, log=log)
    if method == "native":
        raise ValueError(f"{type(hook).__name__} has no native bulk path; use method='generic' or 'auto'")
    from abm_provider.warehouse.generic import GenericLoader

    return GenericLoader(hook, chunk_rows=chunk_rows, log=log)
