"""The smoke tests' helper that fires an execution once the sensor deferred waits for the sensor.

It once fired after a minute counted from the DAG's start: on a loaded machine the tasks before the
sensor took longer, the execution was complete at the sensor's first poll, and the sensor never
deferred ("the sensor never deferred" in three of ``make compat``'s lanes).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import smoke_support


class _Emulator:
    """The two calls the helper makes: the request log (a poll of the executions once ``polled``)."""

    def __init__(self) -> None:
        self.polled = threading.Event()
        self.fired = threading.Event()

    def requests_seen(self) -> list[dict[str, Any]]:
        if not self.polled.is_set():
            return [
                {"method": "GET", "path": "/exportJobs/v1/X/executions", "status": 200, "requestId": "old"}
            ]
        return [{"method": "GET", "path": "/exportJobs/v1/X/executions", "status": 200, "requestId": "new"}]

    def fire(self, export_type: str) -> str:
        self.fired.set()
        return export_type


def test_nothing_is_fired_before_the_sensors_first_poll_however_long_that_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(smoke_support, "_AFTER_FIRST_POLL", 0.05)
    emulator = _Emulator()
    fired: list[Any] = []
    thread = smoke_support.fire_once_deferred(emulator, "X", [], fired)
    # An earlier test's poll (in the log before the helper started) does not count.
    assert not emulator.fired.wait(0.5)
    emulator.polled.set()  # the sensor's first poll, answered; it never defers
    assert emulator.fired.wait(10)
    thread.join(10)
    assert fired == ["X"]


def test_a_deferral_fires_at_once() -> None:
    emulator = _Emulator()
    fired: list[Any] = []
    thread = smoke_support.fire_once_deferred(emulator, "X", ["deferred"], fired)
    assert emulator.fired.wait(10)
    thread.join(10)
    assert fired == ["X"]
