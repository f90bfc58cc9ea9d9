"""The emulated clock: real time scaled by a speed factor, plus explicit jumps from the admin API.

Schedules, execution state changes and link expiry all read this one clock, so a test can move a day
ahead in one call and see exactly what a client would have seen a day later.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


def parse_instant(text: str) -> datetime:
    """An ISO 8601 instant; a naive one is taken as UTC because the service lives in UTC."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def rfc3339(value: datetime) -> str:
    """RFC 3339 UTC with a ``Z`` and whole seconds, the form the real service answers with."""
    return value.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


class EmulatedClock:
    """``now = anchor + (monotonic elapsed since anchoring) * speed``; `advance` moves the anchor."""

    def __init__(self, start: datetime | None = None, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"--clock-speed must be > 0, got {speed}")
        self.speed = speed
        self.start = (start or datetime.now(UTC)).astimezone(UTC)
        self._anchor = self.start
        self._anchor_monotonic = time.monotonic()

    def now(self) -> datetime:
        elapsed = (time.monotonic() - self._anchor_monotonic) * self.speed
        return self._anchor + timedelta(seconds=elapsed)

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError("the emulated clock only moves forward")
        self.set(self.now() + timedelta(seconds=seconds))
        return self.now()

    def set(self, instant: datetime) -> None:
        self._anchor = instant.astimezone(UTC)
        self._anchor_monotonic = time.monotonic()

    def reset(self) -> None:
        self.set(self.start)

    def describe(self) -> dict[str, object]:
        return {"now": self.now().isoformat(), "start": self.start.isoformat(), "speed": self.speed}
