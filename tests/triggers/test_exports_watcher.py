"""``ExecutionCompletedEventTrigger`` (``abm_provider.triggers.exports``), the Asset watcher's trigger,
without a server: one event per new execution, a cursor that holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from abm_provider.assets import export_asset
from abm_provider.exceptions import AbmApiError
from abm_provider.triggers.exports import CURSOR_KEY, ExecutionCompletedEventTrigger

T0 = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


def _execution(execution_id: str, minutes: int, state: str = "COMPLETE") -> dict[str, Any]:
    when = (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"id": execution_id, "state": state, "createTime": when, "updateTime": when}


class Service:
    """The executions a fake service lists, changed by a script between polls.

    ``script[n]`` runs before poll ``n``: a function that edits the executions, or an exception the
    poll raises. Past the script, the poll cancels the trigger (the triggerer stopping it).
    """

    def __init__(self, script: list[Any]) -> None:
        self.executions: list[dict[str, Any]] = []
        self.script = script
        self.polls = 0
        self.read = 0  # executions handed out, over all polls
        self.closed = False

    async def iter_executions(self, export_type: str, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        assert kwargs["state"] == "COMPLETE" and kwargs["order_by"] == "updateTime desc"
        if self.polls >= len(self.script):
            raise asyncio.CancelledError
        step = self.script[self.polls]
        self.polls += 1
        if isinstance(step, BaseException):
            raise step
        if step is not None:
            step(self.executions)
        listed = [e for e in self.executions if e["state"] == "COMPLETE"]
        for execution in sorted(listed, key=lambda e: e["updateTime"], reverse=True):
            self.read += 1
            yield execution

    async def close(self) -> None:
        self.closed = True


class Store:
    """An Asset state store: what the triggerer hands a watcher on Airflow 3.3."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return json.loads(json.dumps(self.values.get(key, default)))

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))  # stored as JSON, as the metadata DB keeps it


class SharedStore:
    """The store of a trigger shared by several Assets: it cannot say whose state to use."""

    async def aget(self, key: str, default: Any = None) -> Any:
        raise ValueError("Task has 2 concrete inlets and outlets")

    async def aset(self, key: str, value: Any) -> None:
        raise ValueError("Task has 2 concrete inlets and outlets")


def add(*executions: dict[str, Any]) -> Any:
    return lambda listed: listed.extend(executions)


def complete(execution_id: str, minutes: int) -> Any:
    def edit(listed: list[dict[str, Any]]) -> None:
        for execution in listed:
            if execution["id"] == execution_id:
                execution.update(_execution(execution_id, minutes))

    return edit


def _trigger(service: Service, store: Any = None, **kwargs: Any) -> ExecutionCompletedEventTrigger:
    options: dict[str, Any] = {"poll_interval": 0.001, "start_after": T0.isoformat()} | kwargs
    trigger = ExecutionCompletedEventTrigger(
        abm_conn_id="abm_default", export_type="TACTIC_PERFORMANCE", asset_name="a", **options
    )
    trigger._hook = lambda: service  # type: ignore[method-assign,assignment,return-value]
    trigger.asset_state_store = store
    return trigger


async def _fired(trigger: ExecutionCompletedEventTrigger) -> list[str]:
    """The execution ids the trigger fires for until the service's script ends."""
    fired: list[str] = []
    with pytest.raises(asyncio.CancelledError):
        async for event in trigger.run():
            assert set(event.payload) == {"execution_id", "export_type", "update_time"}
            assert event.payload["export_type"] == "TACTIC_PERFORMANCE"
            fired.append(event.payload["execution_id"])
    return fired


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The trigger's waits, recorded and not slept (the event loop still gets a turn)."""
    recorded: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        recorded.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("abm_provider.triggers.exports.asyncio.sleep", sleep)
    return recorded


async def test_it_fires_once_per_new_completed_execution_and_never_twice(waits: list[float]) -> None:
    running = _execution("e3", 3, state="RUNNING")
    service = Service(
        [
            add(_execution("e1", 1)),
            None,  # nothing new: nothing fires
            add(_execution("e2", 2), running),
            None,
            complete("e3", 4),
            add(_execution("e4", 4)),  # the same second as e3: a second id at one time still fires
            None,
        ]
    )
    store = Store()
    assert await _fired(_trigger(service, store)) == ["e1", "e2", "e3", "e4"]
    assert service.closed
    assert store.values[CURSOR_KEY] == {
        "update_time": (T0 + timedelta(minutes=4)).isoformat(),
        "ids": ["e3", "e4"],
    }
    # A quiet poll reads back only to the newest execution it fired for, not the whole history.
    assert service.read <= 1 + 1 + 2 + 2 + 3 + 4 + 4


async def test_the_cursor_holds_over_a_restart_with_the_store(waits: list[float]) -> None:
    store = Store()
    first = Service([add(_execution("e1", 1), _execution("e2", 2))])
    assert await _fired(_trigger(first, store)) == ["e1", "e2"]

    # The triggerer restarts: a new instance from the same arguments, the same store, one new execution.
    second = Service([add(_execution("e3", 3))])
    second.executions = list(first.executions)
    assert await _fired(_trigger(second, store)) == ["e3"]


async def test_a_first_start_without_a_start_point_keeps_its_now_over_a_restart(waits: list[float]) -> None:
    """A new watcher starts at the time it first runs; that time is stored, so an execution that
    completes while the triggerer is down still fires after the restart, and history never does."""
    store = Store()
    old = _execution("old", -60)
    first = Service([add(old)])
    assert await _fired(_trigger(first, store, start_after=None)) == []
    started = datetime.fromisoformat(store.values[CURSOR_KEY]["update_time"])
    assert abs((started - datetime.now(UTC)).total_seconds()) < 60

    during = _execution("during", 0)
    during["updateTime"] = (started + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    second = Service([add(during)])
    second.executions = [old]
    assert await _fired(_trigger(second, store, start_after=None)) == ["during"]


@pytest.mark.parametrize("store", [None, SharedStore()], ids=["before_3_3", "shared_trigger"])
async def test_without_a_store_it_starts_at_its_start_point_and_warns_once(
    waits: list[float], store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    service = Service(
        [add(_execution("before", -1), _execution("at", 0), _execution("after", 1)), None, None]
    )
    trigger = _trigger(service, store)
    assert await _fired(trigger) == ["at", "after"]
    assert capsys.readouterr().out.count("No Asset state store") == 1


async def test_without_a_store_and_a_start_point_it_never_replays_history(waits: list[float]) -> None:
    service = Service([add(_execution("old", -24 * 60)), None])
    assert await _fired(_trigger(service, None, start_after=None)) == []


def _unavailable(retry_after: float | None = None) -> AbmApiError:
    return AbmApiError(
        method="GET",
        path="/exports/v1/exportJobs/TACTIC_PERFORMANCE/executions",
        http_status=503,
        status="UNAVAILABLE",
        message="down",
        transient=True,
        retry_after=retry_after,
        attempts=3,
    )


async def test_failures_back_off_honour_retry_after_and_the_budget_resets_on_success(
    waits: list[float],
) -> None:
    service = Service(
        [_unavailable(), _unavailable(120.0), add(_execution("e1", 1)), _unavailable(), _unavailable(), None]
    )
    assert await _fired(_trigger(service, Store(), poll_interval=10, max_consecutive_failures=3)) == ["e1"]
    # Doubling from the poll interval, Retry-After when longer; a success starts the count again.
    assert waits == [10, 120.0, 10, 10, 20, 10]


async def test_past_the_failure_budget_it_raises_a_clear_error(waits: list[float]) -> None:
    service = Service([_unavailable()] * 5)
    with pytest.raises(RuntimeError, match=r"failed 3 times in a row \(max_consecutive_failures=3\)"):
        async for _ in _trigger(service, Store(), max_consecutive_failures=3).run():
            pass
    assert service.polls == 3 and service.closed


async def test_an_error_retrying_cannot_fix_raises_at_once(waits: list[float]) -> None:
    refused = AbmApiError(
        method="GET", path="/x", http_status=401, status="UNAUTHENTICATED", message="bad key"
    )
    service = Service([refused, None])
    with pytest.raises(RuntimeError, match="trying again will not help: .*401"):
        async for _ in _trigger(service, Store()).run():
            pass
    assert service.polls == 1


def test_its_serialized_arguments_are_primitives_unique_per_asset_and_hold_no_secret() -> None:
    trigger = (
        export_asset("TACTIC_PERFORMANCE", "abm_default", 30, hook_params={"max_pages": 5})
        .watchers[0]
        .trigger
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "abm_provider.triggers.exports.ExecutionCompletedEventTrigger"
    text = json.dumps(kwargs)  # nothing but JSON
    assert ExecutionCompletedEventTrigger(**kwargs).serialize() == (classpath, kwargs)
    # Only the connection's id travels; its key, and any link, stay out of the trigger row.
    assert not any(word in text.lower() for word in ("password", "api_key", "secret", "http"))
    assert (
        kwargs["abm_conn_id"] == "abm_default"
        and kwargs["asset_name"] == "abm_export/abm_default/TACTIC_PERFORMANCE"
    )
    other = (
        export_asset("TACTIC_PERFORMANCE", "abm_other", 30, hook_params={"max_pages": 5}).watchers[0].trigger
    )
    assert ExecutionCompletedEventTrigger.hash(classpath, kwargs) != ExecutionCompletedEventTrigger.hash(
        *other.serialize()
    )


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("poll_interval", 0, "poll_interval must be positive"),
        ("max_consecutive_failures", 0, "max_consecutive_failures must be a whole number >= 1"),
        ("start_after", "yesterday", "not an ISO 8601"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(argument: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExecutionCompletedEventTrigger(
            abm_conn_id="abm_default", export_type="TACTIC_PERFORMANCE", **{argument: value}
        )
