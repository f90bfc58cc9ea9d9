"""Which execution ends the wait: the rule the sensor and the trigger share."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from abm_provider.exports.selection import (
    ExecutionSelector,
    parse_timestamp,
    select_execution,
    select_execution_async,
)

T0 = datetime(2026, 3, 1, 5, 0, tzinfo=UTC)


def _execution(n: int, state: str, minutes: int) -> dict[str, Any]:
    item = {
        "id": f"exec-{n}",
        "exportId": "TACTIC_PERFORMANCE",
        "state": state,
        "createTime": (T0 + timedelta(minutes=minutes - 1)).isoformat().replace("+00:00", "Z"),
        "updateTime": (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z"),
    }
    if state == "COMPLETE":
        item["downloadUri"] = f"https://storage.example/exec-{n}.csv?sig=abc"
    return item


def _newest_first(*items: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda e: e["updateTime"], reverse=True)


def test_newest_complete_after_cutoff_wins() -> None:
    executions = _newest_first(
        _execution(1, "COMPLETE", 10), _execution(2, "COMPLETE", 30), _execution(3, "COMPLETE", -60)
    )
    verdict = select_execution(executions, "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "success"
    assert verdict.execution is not None and verdict.execution["id"] == "exec-2"


def test_only_executions_after_the_cutoff_count() -> None:
    executions = _newest_first(_execution(1, "COMPLETE", -5), _execution(2, "FAILED", -1))
    verdict = select_execution(executions, "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "waiting"
    assert "no TACTIC_PERFORMANCE execution updated after" in verdict.reason


def test_exactly_at_cutoff_does_not_count() -> None:
    verdict = select_execution([_execution(1, "COMPLETE", 0)], "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "waiting"


def test_no_cutoff_accepts_any_execution() -> None:
    verdict = select_execution([_execution(1, "COMPLETE", -10_000)], "TACTIC_PERFORMANCE", None)
    assert verdict.outcome == "success"


def test_newest_failed_fails_with_its_id() -> None:
    executions = _newest_first(_execution(1, "COMPLETE", 10), _execution(2, "FAILED", 20))
    verdict = select_execution(executions, "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "failed"
    assert verdict.execution is not None and verdict.execution["id"] == "exec-2"
    assert "exec-2" in verdict.reason and "FAILED" in verdict.reason


def test_running_rerun_newer_than_a_failure_keeps_waiting() -> None:
    executions = _newest_first(_execution(1, "FAILED", 10), _execution(2, "RUNNING", 20))
    verdict = select_execution(executions, "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "waiting"
    assert "exec-2" in verdict.reason


def test_complete_older_than_a_running_one_is_used() -> None:
    executions = _newest_first(_execution(1, "COMPLETE", 10), _execution(2, "PENDING", 20))
    verdict = select_execution(executions, "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "success"
    assert verdict.execution is not None and verdict.execution["id"] == "exec-1"


def test_unknown_state_waits_rather_than_succeeds() -> None:
    verdict = select_execution([_execution(1, "QUEUED_FOR_REVIEW", 10)], "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "waiting"


def test_stops_reading_once_decided() -> None:
    consumed: list[str] = []

    def pages() -> Iterator[dict[str, Any]]:
        for item in _newest_first(*(_execution(n, "COMPLETE", 100 - n) for n in range(50))):
            consumed.append(item["id"])
            yield item

    verdict = select_execution(pages(), "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "success"
    assert consumed == ["exec-0"]


def test_stops_at_first_execution_before_cutoff() -> None:
    consumed: list[str] = []

    def pages() -> Iterator[dict[str, Any]]:
        for item in _newest_first(
            _execution(1, "RUNNING", 5), *(_execution(n, "COMPLETE", -n) for n in range(2, 40))
        ):
            consumed.append(item["id"])
            yield item

    assert select_execution(pages(), "TACTIC_PERFORMANCE", T0).outcome == "waiting"
    assert consumed == ["exec-1", "exec-2"]


async def test_async_variant_agrees() -> None:
    async def pages() -> Any:
        for item in _newest_first(_execution(1, "COMPLETE", 10), _execution(2, "FAILED", 20)):
            yield item

    verdict = await select_execution_async(pages(), "TACTIC_PERFORMANCE", T0)
    assert verdict.outcome == "failed"


def test_feed_after_decision_returns_same_verdict() -> None:
    selector = ExecutionSelector("TACTIC_PERFORMANCE", None)
    first = selector.feed(_execution(1, "COMPLETE", 1))
    assert first is not None and selector.feed(_execution(2, "FAILED", 0)) is first


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T05:00:00Z", T0),
        ("2026-03-01T05:00:00+00:00", T0),
        ("2026-03-01T06:00:00+01:00", T0),
        ("2026-03-01T05:00:00", T0),
        ("2026-03-01T05:00:00.123456789Z", T0.replace(microsecond=123456)),
    ],
)
def test_parse_timestamp(text: str, expected: datetime) -> None:
    assert parse_timestamp(text) == expected


def test_parse_timestamp_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not an ISO 8601"):
        parse_timestamp("yesterday")
