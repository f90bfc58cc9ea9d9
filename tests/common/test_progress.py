"""``abm_provider.common.progress``: at most one progress line every ``interval`` seconds, with its rate.

The module's clock is one the test moves, so the lines are counted without waiting; the log is a
list of the lines the work would have written.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from abm_provider.common import progress
from abm_provider.common.progress import ByteProgress, RowProgress

MiB = 1 << 20


class Clock:
    """``time.monotonic`` as the test sets it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines:
    """A logger that keeps the lines it is given, formatted."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        self.lines.append(message % args)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=made))  # this module's clock alone
    return made


def test_bytes_pass_unchanged_with_a_line_only_once_the_interval_has_passed(clock: Clock) -> None:
    log = Lines()
    meter = ByteProgress(log, "Download of e-1", interval=10)
    chunks = [b"a" * MiB, b"b" * MiB, b"c" * MiB, b"d" * MiB]
    passed = []
    for chunk in meter.through(iter(chunks), total=4 * MiB):  # counted at 0, 5, 10 and 15 s
        passed.append(chunk)
        clock.now += 5
    assert passed == chunks
    # Due at the third chunk (10 s after the start, 3 MiB done), not again 5 s later.
    assert log.lines == ["Download of e-1: 3.0 MiB of 4.0 MiB (75%) at 0.3 MiB/s"]


def test_a_line_without_a_known_total_gives_no_share(clock: Clock) -> None:
    log = Lines()
    meter = ByteProgress(log, "Copy", interval=0)
    clock.now += 2
    meter(2 * MiB, None)
    assert log.lines == ["Copy: 2.0 MiB at 1.0 MiB/s"]


def test_rows_are_logged_at_most_once_per_interval(clock: Clock) -> None:
    log = Lines()
    meter = RowProgress(log, "Add l-1", interval=5)
    stats = {"rows": 0, "sent": 0, "batches": 0, "rejected": 0, "not_found": 0}
    for second in range(1, 13):  # a call every second for 12 s: lines at 5 s and 10 s
        clock.now += 1
        stats = {**stats, "rows": 100 * second, "sent": 90 * second, "batches": second}
        meter.maybe_log(stats)
    assert log.lines == [
        "Add l-1: 500 rows read, 450 accounts sent in 5 batches, 0 invalid, 0 not found; 100 rows/s",
        "Add l-1: 1000 rows read, 900 accounts sent in 10 batches, 0 invalid, 0 not found; 100 rows/s",
    ]
