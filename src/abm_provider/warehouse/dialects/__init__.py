"""The registry of warehouse dialects: which :class:`~.base.Dialect` a common-sql hook gets.

A hook is matched by its connection type (``conn_type``), then by the SQL dialect common-sql names
for its connection (``DbApiHook.dialect_name``, SQLAlchemy's name). A hook neither names gets the
generic dialect, which works through any DB-API driver and quotes as the driver's dialect says.
Adding a warehouse is one module here and one line in :data:`DIALECTS`. Each dialect declares its own
options (:mod:`.options`), read here from the connection's extra and the task's mapping.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import is_dataclass
from typing import Any

from abm_provider.warehouse.dialects.base import Dialect, Staged
from abm_provider.warehouse.dialects.capabilities import Capabilities
from abm_provider.warehouse.dialects.options import NoOptions, connection_options, read_options

__all__ = [
    "DIALECTS",
    "Capabilities",
    "Dialect",
    "NoOptions",
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
    "snowflake": "abm_provider.warehouse.dialects.snowflake.SnowflakeDialect",
    "google_cloud_platform": "abm_provider.warehouse.dialects.bigquery.BigQueryDialect",
    "bigquery": "abm_provider.warehouse.dialects.bigquery.BigQueryDialect",
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
    join it may not have), its own ``options_type`` (one inherited would take settings meant for
    another warehouse), and the methods its capabilities promise.
    """
    declared = cls.__dict__.get("capabilities")
    if not isinstance(declared, Capabilities):
        wanted = ", ".join(f"{name}=..." for name in Capabilities.__dataclass_fields__)
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares no capabilities of its own: set "
            f"capabilities = Capabilities({wanted})"
        )
    options_type = cls.__dict__.get("options_type")
    if not (isinstance(options_type, type) and is_dataclass(options_type)):
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares no options of its own: set options_type to "
            "a frozen dataclass of its settings (NoOptions where it has none)"
        )
    if declared.param_style in ("named", "pyformat") and cls.positional_marker is Dialect.positional_marker:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares param_style={declared.param_style!r} but does not "
            "define positional_marker: the loader's statements bind with a positional marker"
        )
    if declared.rules_in_sql and cls.matches_sql is Dialect.matches_sql:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares rules_in_sql but does not define matches_sql"
        )
    if declared.strips_like_python and cls.strip_sql is Dialect.strip_sql:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} declares strips_like_python but does not define strip_sql"
        )


def dialect_for(
    hook: Any,
    *,
    native: bool = True,
    options: Mapping[str, Any] | None = None,
    chunk_rows: int = 10_000,
    log: logging.Logger | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Dialect:
    """A dialect for loads through ``hook``; ``native=False`` asks for the generic one whatever it is.

    ``options``: the task's ``dialect_options``, over the connection's extra ``dialect_options``,
    over ``defaults`` (offered where the dialect has such an option, ignored where not). They are
    checked against the warehouse's own dialect, whose settings they are, even when ``native=False``
    takes the generic path, which has none and so uses none of them.
    """
    own = _class_for(hook)
    settings = read_options(
        own.name, own.options_type, given=options, connection=connection_options(hook), defaults=defaults
    )
    cls = own if native else _load(GENERIC)
    if cls is not own:
        if settings != own.options_type():
            (log or logging.getLogger(__name__)).info(
                "The generic path has no options: the %s dialect's %s are not used", own.name, settings
            )
        settings = cls.options_type()
    return cls(hook, settings, chunk_rows=chunk_rows, log=log)
