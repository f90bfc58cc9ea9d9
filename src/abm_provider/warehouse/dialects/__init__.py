"""The registry of warehouse dialects: which :class:`~.base.Dialect` a common-sql hook gets.

A hook is matched by its connection type (``conn_type``), then by the SQL dialect common-sql names
for its connection (``DbApiHook.dialect_name``, SQLAlchemy's name). A hook neither names gets the
generic dialect, which works through any DB-API driver and quotes as the driver's dialect says.
Adding a warehouse is one module here and one line in :data:`DIALECTS`.
"""

from __future__ import annotations

import importlib
import logging
from contextlib import suppress
from typing import Any

from abm_provider.warehouse.dialects.base import Dialect, DialectOptions, Staged
from abm_provider.warehouse.dialects.capabilities import Capabilities

__all__ = [
    "DIALECTS",
    "Capabilities",
    "Dialect",
    "DialectOptions",
    "Staged",
    "check_declared",
    "dialect_for",
    "dialect_name",
]

#: Dialect classes by the names a hook may give (connection type or SQLAlchemy dialect name).
DIALECTS: dict[str, str] = {
    "duckdb": "abm_provider.warehouse.dialects.duckdb.DuckDBDialect",
    "postgres": "abm_provider.warehouse.dialects.postgres.PostgresDialect",
    "postgresql": "abm_provider.warehouse.dialects.postgres.PostgresDialect",
    "mysql": "abm_provider.warehouse.dialects.mysql.MySQLDialect",
}
GENERIC = "abm_provider.warehouse.dialects.generic.GenericDialect"


def _names(hook: Any) -> list[str]:
    """What the hook says it is: its connection type, then common-sql's dialect name when it has one."""
    names = [str(getattr(hook, "conn_type", "") or "").lower()]
    with suppress(Exception):  # no connection behind the hook to ask (a hook built by hand)
        names.append(str(hook.dialect_name).lower())
    return [n for n in names if n]


def dialect_name(hook: Any) -> str:
    """The registry's name of the hook's warehouse (``duckdb``, ``postgres``...), or ``generic``."""
    return _class_for(hook).name


def _class_for(hook: Any) -> type[Dialect]:
    return _load(next((DIALECTS[n] for n in _names(hook) if n in DIALECTS), GENERIC))


def _load(path: str) -> type[Dialect]:
    """The class at ``module.Class``, imported only when asked for (each needs its driver's extra)."""
    module, _, name = path.rpartition(".")
    found = getattr(importlib.import_module(module), name)
    if not (isinstance(found, type) and issubclass(found, Dialect)):
        raise TypeError(f"{path} is not a Dialect")
    check_declared(found)
    return found


def check_declared(cls: type[Dialect]) -> None:
    """Refuse a dialect class that does not declare what it can do, naming what it lacks.

    Its own :class:`Capabilities` (one inherited from the dialect it extends would claim a lock or a
    join it may not have), and the methods its capabilities promise.
    """
    declared = cls.__dict__.get("capabilities")
    if not isinstance(declared, Capabilities):
        wanted = ", ".join(f"{name}=..." for name in Capabilities.__dataclass_fields__)
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares no capabilities of its own: set "
            f"capabilities = Capabilities({wanted})"
        )
    if declared.rules_in_sql and cls.matches_sql is Dialect.matches_sql:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares rules_in_sql but does not define matches_sql"
        )


def dialect_for(
    hook: Any,
    *,
    native: bool = True,
    options: DialectOptions | None = None,
    log: logging.Logger | None = None,
) -> Dialect:
    """A dialect for one load through ``hook``; ``native=False`` asks for the generic one whatever it is."""
    cls = _class_for(hook) if native else _load(GENERIC)
    return cls(hook, options, log)
