"""``ExecutionCompleteTrigger`` (``abm_provider.triggers.exports``) without a server: primitives only,
one terminal event, deadline honoured."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._pipeline import Answer, Call
from abm_provider.triggers.exports import ExecutionCompleteTrigger
from support.abm_connections import abm_connection, abm_pipeline

EXECUTIONS = "/exports/v1/exportJobs/X/executions"


class FakeAsyncHook:
    """Answers each poll from a script: a list of executions or an exception to raise."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.polls = 0
        self.closed = False

    async def iter_executions(self, export_type: str, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        step = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        if isinstance(step, BaseException):
            raise step
        for item in step:
            yield item

    async def close(self) -> None:
        self.closed = True


def _trigger(monkeypatch: pytest.MonkeyPatch, hook: FakeAsyncHook, **kwargs: Any) -> ExecutionCompleteTrigger:
    trigger = ExecutionCompleteTrigger(
        abm_conn_id="abm_default", export_type="TACTIC_PERFORMANCE", poll_interval=0.01, **kwargs
    )
    monkeypatch.setattr(trigger, "_hook", lambda: hook)
    return trigger


async def _events(trigger: ExecutionCompleteTrigger) -> list[dict[str, Any]]:
    return [event.payload async for event in trigger.run()]


def _api_error(status: int) -> AbmApiError:
    """The error the hook raises, after its own retries, for an answer of ``status``."""
    with pytest.raises(AbmApiError) as info:
        abm_pipeline(abm_connection(conn_id="abm_default")).interpret(
            Call("GET", EXECUTIONS), Answer(status, {}, b'{"error": {"message": "boom"}}')
        )
    return info.value


def _connection_reset() -> AbmApiError:
    """The error the hook raises, after its own retries, for a connection reset by the peer."""
    return abm_pipeline(abm_connection(conn_id="abm_default")).failure(
        Call("GET", EXECUTIONS), "lost", "ConnectionResetError: reset"
    )


COMPLETE = {
    "id": "e1",
    "state": "COMPLETE",
    "updateTime": "2026-03-01T06:00:00Z",
    "downloadUri": "https://x/y",
}
FAILED = {"id": "e2", "state": "FAILED", "updateTime": "2026-03-01T06:00:00Z"}


def test_serializes_primitives_only_and_round_trips() -> None:
    trigger = ExecutionCompleteTrigger(
        abm_conn_id="abm_default",
        export_type="TACTIC_PERFORMANCE",
        updated_after="2026-03-01T00:00:00+00:00",
        poll_interval=30,
        deadline=1_800_000_000.5,
        hook_params={"max_pages": 7},
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "abm_provider.triggers.exports.ExecutionCompleteTrigger"
    json.dumps(kwargs)  # nothing but JSON primitives
    settings = kwargs.pop("hook_params")
    assert settings == {"max_pages": 7}
    assert all(v is None or isinstance(v, (str, int, float)) for v in kwargs.values())
    kwargs["hook_params"] = settings
    assert not any("key" in name or "password" in name for name in kwargs)
    assert ExecutionCompleteTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_trigger_takes_the_settings_by_their_one_name_only() -> None:
    """``max_wait`` was never released as a trigger argument: refused, not read as ``retry_max_wait``."""
    kwargs = {"abm_conn_id": "abm_default", "export_type": "TACTIC_PERFORMANCE", "retry_max_wait": 4.0}
    assert ExecutionCompleteTrigger(**kwargs)._hook().hook_params["retry_max_wait"] == 4.0
    with pytest.raises(TypeError, match="max_wait"):
        ExecutionCompleteTrigger(**{**kwargs, "max_wait": 4.0})


async def test_success_after_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = FakeAsyncHook(
        [[], [{"id": "e0", "state": "RUNNING", "updateTime": "2026-03-01T05:00:00Z"}], [COMPLETE]]
    )
    events = await _events(_trigger(monkeypatch, hook))
    assert events == [{"status": "success", "execution": COMPLETE}]
    assert hook.polls == 3 and hook.closed


async def test_failed_execution_is_a_failed_event(monkeypatch: pytest.MonkeyPatch) -> None:
    events = await _events(_trigger(monkeypatch, FakeAsyncHook([[FAILED]])))
    assert len(events) == 1 and events[0]["status"] == "failed"
    assert "e2" in events[0]["message"]


async def test_deadline_gives_one_timeout_event(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = FakeAsyncHook([[]])
    events = await _events(_trigger(monkeypatch, hook, deadline=time.time() + 0.2))
    assert [e["status"] for e in events] == ["timeout"]
    assert "deadline" in events[0]["message"]


async def test_retryable_errors_keep_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = FakeAsyncHook([_api_error(503), _api_error(429), _connection_reset(), [COMPLETE]])
    events = await _events(_trigger(monkeypatch, hook))
    assert [e["status"] for e in events] == ["success"]
    assert hook.polls == 4


async def test_permanent_error_is_an_error_event(monkeypatch: pytest.MonkeyPatch) -> None:
    events = await _events(_trigger(monkeypatch, FakeAsyncHook([_api_error(404)])))
    assert [e["status"] for e in events] == ["error"]
    assert events[0]["http_status"] == 404


def test_bad_cutoff_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="not an ISO 8601"):
        ExecutionCompleteTrigger(abm_conn_id="c", export_type="T", updated_after="soon")


def test_the_sensors_hook_params_reach_the_triggers_hook() -> None:
    """A bound set on the sensor (``max_pages``) still holds once the wait is deferred."""
    from abm_provider.sensors.exports import ExecutionCompleteSensor

    sensor = ExecutionCompleteSensor(
        task_id="wait", export_type="TACTIC_PERFORMANCE", hook_params={"max_pages": 7}, max_attempts=2
    )
    assert sensor.get_hook().hook_params["max_pages"] == 7
    trigger = ExecutionCompleteTrigger(
        abm_conn_id="abm_default", export_type="TACTIC_PERFORMANCE", hook_params=sensor.hook_params
    )
    hook = ExecutionCompleteTrigger(**trigger.serialize()[1])._hook()
    assert hook.hook_params["max_pages"] == 7
