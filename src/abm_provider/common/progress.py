"""Progress lines for long work: at most one every ``interval`` seconds, each with its rate.

A download of gigabytes, a COPY into the warehouse and an add/remove run over a million accounts all
log the same way, so a task log always shows life and how fast it goes, without a line per chunk.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any


class Progress:
    """The clock of one long task: whether a line is due, the time so far and the rate."""

    def __init__(self, log: Any, label: str, interval: float) -> None:
        self.log = log
        self.label = label
        self.interval = interval
        self.started = time.monotonic()
        self._last = self.started

    def elapsed(self) -> float:
        """Seconds since the work started."""
        return time.monotonic() - self.started

    def rate(self, done: float) -> float:
        """Average units per second so far."""
        return done / max(self.elapsed(), 1e-9)

    def due(self) -> bool:
        """Whether ``interval`` seconds passed since the last line; if so, the next line starts now."""
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        return True


class ByteProgress(Progress):
    """Bytes, share of the total when known, and MiB/s; usable as the hook's ``on_progress``."""

    def __call__(self, done: int, total: int | None) -> None:
        if self.due():
            self.log_now(done, total)

    def log_now(self, done: int, total: int | None) -> None:
        """Log one progress line."""
        share = f" of {total / 2**20:.1f} MiB ({100 * done / total:.0f}%)" if total else ""
        self.log.info(
            "%s: %.1f MiB%s at %.1f MiB/s", self.label, done / 2**20, share, self.rate(done) / 2**20
        )

    def through(self, chunks: Iterable[bytes], total: int | None) -> Iterator[bytes]:
        """The chunks, unchanged, logging as they pass."""
        done = 0
        for chunk in chunks:
            done += len(chunk)
            self(done, total)
            yield chunk


class RowProgress(Progress):
    """Rows read, accounts sent and refused, and rows/s, for an add or remove run."""

    def maybe_log(self, stats: Mapping[str, int]) -> None:
        """Log if the interval has passed since the last line."""
        if self.due():
            self.log_now(stats)

    def log_now(self, stats: Mapping[str, int]) -> None:
        """Log one progress line."""
        self.log.info(
            "%s: %d rows read, %d accounts sent in %d batches, %d invalid, %d not found; %.0f rows/s",
            self.label,
            stats["rows"],
            stats["sent"],
            stats["batches"],
            stats["rejected"],
            stats["not_found"],
            self.rate(stats["rows"]),
        )
