"""The argument checks every layer shares: one rule per kind of value, and one wording per error.

An operator checks its arguments when the DAG is parsed (and again once its templates are rendered),
a hook before it builds a request, the list sync before it plans: all with these functions, so a
name, a choice, a count or a flag is refused in the same words wherever it is given, and every error
names the argument. Each check returns the value it accepted, converted where its rule says so (a
rendered ``"true"`` becomes ``True``), so a caller checks and keeps the value in one line.

A rule only one owner has stays with it, built on these: the API's batch limit
(:func:`abm_provider.hooks.endpoints.check_batch_size`), a reject limit
(:func:`abm_provider.common.rejects.check_limit`), a list sync's lock wait
(:func:`abm_provider.accounts.sync.lock.check_lock_timeout`). *When* a value is checked (at parse
time if it is known, once rendered if it is a template or an XComArg) is the operators' concern:
:mod:`abm_provider.operators.base`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

from abm_provider.common.urls import path_segment

__all__ = [
    "check_choice",
    "check_flag",
    "check_id",
    "check_number",
    "check_positive",
    "check_text",
    "check_whole",
    "parse_rendered",
]

T = TypeVar("T")

#: What a rendered template says for "no value".
_NONE_TEXTS = ("none", "null", "")


def check_text(value: Any, name: str) -> str:
    """Return ``value`` if it is a string with something in it besides white space, else raise
    ``ValueError`` naming ``name``."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if not value.strip():
        raise ValueError(f"{name} is empty")
    return value


def check_id(value: Any, name: str) -> str:
    """Return ``value`` if it is safe as one URL path segment (a list id, an export type), else raise.

    A list id such as ``"../folders"`` or ``"x/accounts/remove"`` would address another endpoint. The
    hook refuses it too, when it builds the request; checking the argument first fails the DAG at
    parse time, or the task without retries. The rule itself is the URL rules'
    (:func:`~abm_provider.common.urls.path_segment`).
    """
    path_segment(value, name)
    return str(value)


def check_choice(value: Any, name: str, choices: Sequence[T]) -> T:
    """Return ``value`` if it is one of ``choices``, else raise naming ``name`` and what it accepts.

    Two choices read as ``'a' or 'b'``, more as a list, so every argument words the error alike.
    """
    if value not in choices:
        allowed = " or ".join(map(repr, choices)) if len(choices) == 2 else f"one of {list(choices)}"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return choices[list(choices).index(value)]


def check_whole(value: Any, name: str, low: int, high: int | None = None) -> int:
    """Return ``value`` if it is a whole number from ``low`` to ``high`` (no upper bound if ``None``).

    A ``bool`` is refused although Python counts it as an int (``True`` is almost always a mistake),
    and so is a float, even ``2.0``: a count given as a float is more likely a share given wrongly.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if high is None and value < low:
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    if high is not None and not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def check_positive(value: Any, name: str) -> float:
    """Return ``value`` if it is a number above zero (an interval, a wait), else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not value > 0:  # also refuses NaN
        raise ValueError(f"{name} must be positive, got {value!r}")
    return value


def check_number(value: Any, name: str, low: float, *, above: bool = False, unit: str = "") -> float:
    """Return ``value`` as a float if it is a finite number from ``low`` up (above ``low`` when
    ``above``), else raise naming ``name`` and the number's ``unit`` (``"seconds"``, ``"days"``).

    Infinity is refused: an argument that may be unbounded takes ``None`` for that, which says so.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        fits = False
    else:
        fits = value > low if above else value >= low
    if not fits:
        kind = f"a number of {unit}" if unit else "a number"
        raise ValueError(f"{name} must be {kind} {'>' if above else '>='} {low:g}, got {value!r}")
    return float(value)


def check_flag(value: Any, name: str) -> bool:
    """Return a flag given as a ``bool`` or, once rendered from a template, as ``"true"``/``"false"``."""
    flag = parse_rendered(value)
    if not isinstance(flag, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return flag


def parse_rendered(value: Any) -> Any:
    """``value`` as a rendered template means it: the text of a flag, a number or no value becomes one.

    Airflow renders a templated argument to text, so ``"{{ params.dry_run }}"`` arrives as
    ``"false"`` and ``"{{ params.limit }}"`` as ``"0.25"``. Text reads as ``True``/``False``
    (``"true"``, ``"false"`` in any case), ``None`` (``"none"``, ``"null"``, empty), an ``int``
    (``"10"``) or a ``float`` (``"0.25"``, ``"1e3"``, ``"inf"``); any other text, and any value
    that is not text, is returned as given for the caller's check to refuse or keep.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in _NONE_TEXTS:
        return None
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return value
