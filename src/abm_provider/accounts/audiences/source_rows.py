"""A source's rows as the audience sync reads them through Python: in chunks, and as text.

Used where a source or an exclusion is not on the state connection (another connection, a file), so
its rows are read here and staged into a work table of the state database.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any


def chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``rows`` in lists of at most ``size``, so no more than one chunk is held at a time."""
    source = iter(rows)
    while chunk := list(islice(source, size)):
        yield chunk


def value_of(data: Any, column: str) -> Any:
    """A source row's value in ``column``; ``None`` for a row that is not a mapping."""
    return data.get(column) if isinstance(data, dict) else None


def texts(data: Any, columns: Sequence[str]) -> list[str | None]:
    """A source row's values in ``columns`` order, as text (``None`` stays ``NULL``)."""
    values = data if isinstance(data, dict) else {}
    return [None if (v := values.get(c)) is None else str(v) for c in columns]
