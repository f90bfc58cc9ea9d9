"""Each dialect's own options: a frozen dataclass the dialect class declares, read from one mapping.

A warehouse's settings belong to its dialect, the way dlt keeps each destination's settings in its
own configuration class: DuckDB's memory limit is the DuckDB dialect's, and a Snowflake stage name
would be Snowflake's, with no argument of every operator for each. A dialect declares
``options_type`` (:class:`NoOptions` where it has none; the registry checks it is declared); the
values come from, lowest first:

1. what the caller offers wherever the dialect has such an option (``defaults``: the list sync's
   state database offers DuckDB's smaller memory limit, and a warehouse without one ignores it);
2. the connection's extra ``dialect_options`` (a JSON object), set once for every task;
3. the task's ``dialect_options=`` mapping.

A key the dialect does not declare, or a value of the wrong type, fails naming the key, the dialect
and its options: a typo would otherwise be a setting silently not applied.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Literal

#: The connection extra that holds a dialect's options, as a JSON object.
EXTRA_KEY = "dialect_options"


@dataclass(frozen=True, kw_only=True)
class NoOptions:
    """The options of a dialect that has none."""


def connection_options(hook: Any) -> Mapping[str, Any]:
    """The connection's extra ``dialect_options``: ``{}`` when it has none or the hook no connection."""
    extra: Any = None
    with suppress(Exception):  # a hook built by hand has no connection to read
        extra = hook.connection_extra
    value = extra.get(EXTRA_KEY) if isinstance(extra, Mapping) else None
    if isinstance(value, str):  # an extra written as text holding the JSON object
        with suppress(ValueError):
            value = json.loads(value)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"the connection's extra {EXTRA_KEY} must be a JSON object, got {value!r}")
    return value


def read_options(
    dialect: str,
    options_type: type[Any],
    *,
    given: Mapping[str, Any] | None = None,
    connection: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Any:
    """An ``options_type`` from ``defaults`` (only the keys it declares), then ``connection``, then
    ``given`` (each over the one before); an undeclared key or a wrong type raises ``ValueError``."""
    hints = _field_types(options_type)
    values = {key: value for key, value in (defaults or {}).items() if key in hints}
    for source, layer in (("the connection's extra", connection), ("the task", given)):
        for key, value in (layer or {}).items():
            if key not in hints:
                raise ValueError(
                    f"{EXTRA_KEY} from {source}: {key!r} is not an option of the {dialect} dialect; "
                    f"{describe_options(dialect, options_type)}"
                )
            values[key] = value
    for key, value in values.items():
        if not _is_instance(value, hints[key]):
            raise ValueError(
                f"{EXTRA_KEY}: {key} of the {dialect} dialect must be {_type_name(hints[key])}, got "
                f"{value!r}; {describe_options(dialect, options_type)}"
            )
    return options_type(**values)


def describe_options(dialect: str, options_type: type[Any]) -> str:
    """``its options: memory_limit (str | None, default '1GB'), ...``, or that it has none."""
    hints = _field_types(options_type)
    if not hints:
        return f"the {dialect} dialect has no options"
    known = ", ".join(
        f"{field.name} ({_type_name(hints[field.name])}, default {field.default!r})"
        for field in fields(options_type)
    )
    return f"its options: {known}"


def _field_types(options_type: type[Any]) -> dict[str, Any]:
    if not is_dataclass(options_type):
        raise TypeError(f"{options_type.__qualname__} is not a dataclass of options")
    hints = typing.get_type_hints(options_type)
    return {field.name: hints[field.name] for field in fields(options_type)}


def _is_instance(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the declared type: a class, ``None``, a union of them or a ``Literal``."""
    if hint is type(None) or hint is None:
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_instance(value, arg) for arg in typing.get_args(hint))
    if origin is Literal:
        return value in typing.get_args(hint)
    cls = origin or hint
    if cls is int and isinstance(value, bool):  # True is an int to Python, never a thread count
        return False
    if cls is float and isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, cls)


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "None"
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
