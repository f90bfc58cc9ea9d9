"""What PostgreSQL's ``COPY`` needs beside the dialect: the pre-scan that reads the same bytes, what
the two found together, and a file over chunks for psycopg2's ``copy_expert``.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abm_provider.warehouse.prescan import DaySet, KeyOrder, count_if_all_pass

if TYPE_CHECKING:
    from abm_provider.warehouse.checks import ColumnPlan
    from abm_provider.warehouse.load import StreamReader


@dataclass(frozen=True)
class Copied:
    """What one ``COPY`` with the pre-scan beside it found.

    ``rows``: what ``COPY`` stored (-1 if the driver won't say); ``passed``: the pre-scan's record
    count when every record passed the rules, else ``None``; ``keys_increasing``: the pre-scan saw
    the natural keys in strictly increasing order.
    """

    rows: int
    passed: int | None
    keys_increasing: bool
    #: The days the pre-scan read (:class:`~abm_provider.warehouse.prescan.DaySet`), if it read them.
    days: tuple[str, ...] | None = None

    @property
    def all_pass(self) -> bool:
        """Every record ``COPY`` stored passed the rules (the pre-scan counted the same records)."""
        return self.passed is not None and self.passed == self.rows

    @property
    def keys_unique(self) -> bool:
        return self.all_pass and self.keys_increasing

    @property
    def proven_days(self) -> tuple[str, ...] | None:
        """The days of the rows, when every record passed the rules (so each is a valid day)."""
        return self.days if self.all_pass else None


def scan_stream(
    reader: StreamReader,
    plan: ColumnPlan,
    keys: Sequence[str],
    stop: threading.Event,
    order: KeyOrder,
    days: DaySet | None,
) -> int | None:
    """The pre-scan of a file still arriving; its reader is let go when the scan ends, even early,
    so that a doubt found half-way never holds the download back."""
    try:
        return count_if_all_pass(reader, plan.header, dict(plan.kinds), keys, stop, order, days)
    finally:
        reader.detach()


class IterFile(io.RawIOBase):
    """A read-only file over an iterator of byte chunks, for psycopg2's ``copy_expert``."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._rest = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._rest) < size:
            nxt = next(self._chunks, None)
            if nxt is None:
                break
            self._rest += nxt
        if size < 0:
            out, self._rest = self._rest, b""
        else:
            out, self._rest = self._rest[:size], self._rest[size:]
        return out
