"""Export executions in the triggerer: a deferred sensor's wait, and an Asset watcher's events.

- :class:`ExecutionCompleteTrigger` waits for one execution for a deferred sensor. Which execution
  ends the wait is decided by :class:`~abm_provider.exports.selection.ExecutionSelector`, shared with
  the sensor. It carries its own deadline because a deferred task otherwise loses the sensor's
  ``timeout`` (apache/airflow#61467).
- :class:`ExecutionCompletedEventTrigger` watches an export type for an Asset and fires once per
  execution that completes (see :func:`abm_provider.assets.export_asset`).

Both serialize primitives only (connection id, type, times, intervals): the API key stays in the
connection, which the async hook resolves in the triggerer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from abm_provider.common.arguments import check_positive, check_whole
from abm_provider.hooks.settings import TASK_SETTINGS, TaskSettings

if TYPE_CHECKING:
    from abm_provider.hooks.abm import AbmAsyncHook

from abm_provider.exports.selection import (
    COMPLETE_STATE,
    Verdict,
    execution_time,
    is_retryable,
    parse_timestamp,
    select_execution_async,
)

__all__ = [
    "ExecutionCompleteTrigger",
    "ExecutionCompletedEventTrigger",
]


class _ListsExecutions(TaskSettings):
    """A trigger that lists an export type's executions with the async hook its settings make."""

    #: The trigger's own arguments, kept as attributes of the same names, as it serializes them.
    _arguments: tuple[str, ...] = ()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and primitive kwargs only (its own arguments, then the hook settings): no key,
        no link, no hook, no datetime objects."""
        own = {name: getattr(self, name) for name in self._arguments}
        return f"{type(self).__module__}.{type(self).__qualname__}", {**own, **self.hook_settings()}

    def _hook(self) -> AbmAsyncHook:
        from abm_provider.hooks.abm import AbmAsyncHook

        return AbmAsyncHook(self.abm_conn_id, **self.hook_kwargs())


class ExecutionCompleteTrigger(_ListsExecutions, BaseTrigger):
    """Poll the executions of one export type until one completes or fails, or the deadline passes.

    Yields exactly one event and returns. Its payload has ``status``:

    - ``"success"`` with ``execution`` (the COMPLETE execution, as the service returned it);
    - ``"failed"`` with ``execution`` and ``message`` (the newest matching execution failed);
    - ``"timeout"`` with ``message`` (``deadline`` passed);
    - ``"error"`` with ``message`` and ``http_status`` (an error that retrying will not fix).

    :param abm_conn_id: connection of type ``abm``; resolved asynchronously in the triggerer.
    :param export_type: export job type, e.g. ``TACTIC_PERFORMANCE``.
    :param updated_after: ISO 8601 cut-off; only executions updated after it count (``None``: any).
    :param poll_interval: seconds between polls.
    :param deadline: POSIX time (seconds) after which a ``timeout`` event is sent; ``None``: no limit.
    :param max_attempts: attempts per request (hook default if None).
    :param retry_max_wait: longest single back-off wait in seconds (hook default if None).
    :param request_timeout: total deadline of one request in seconds (hook default if None).
    :param hook_params: any other hook setting by name (``max_pages``...), numbers only.

    The deadline is also checked between the pages of one look, so a service that keeps handing out
    pages cannot hold the trigger past it.
    """

    _arguments = ("export_type", "updated_after", "poll_interval", "deadline")

    def __init__(
        self,
        *,
        abm_conn_id: str,
        export_type: str,
        updated_after: str | None = None,
        poll_interval: float = 60.0,
        deadline: float | None = None,
        **settings: Any,
    ) -> None:
        """``settings``: ``max_attempts``, ``retry_max_wait``, ``request_timeout`` and ``hook_params``."""
        super().__init__()
        check_positive(poll_interval, "poll_interval")  # in the worker, not in the triggerer
        # Fail at construction (in the worker, before deferring) rather than in the triggerer.
        self._cutoff = parse_timestamp(updated_after)
        self.export_type = export_type
        self.updated_after = updated_after
        self.poll_interval = float(poll_interval)
        self.deadline = None if deadline is None else float(deadline)
        self.set_hook_settings(abm_conn_id, **(dict.fromkeys(TASK_SETTINGS) | settings))

    async def check_once(self, hook: AbmAsyncHook) -> Verdict:
        """One look at the executions, newest first, reading only as many pages as the answer needs."""
        executions = hook.iter_executions(
            self.export_type, order_by="updateTime desc", deadline=self.deadline
        )
        return await select_execution_async(executions, self.export_type, self._cutoff)

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until a terminal verdict, a non-retryable error or the deadline; yield one event."""
        hook = self._hook()
        last_reason = ""
        try:
            while True:
                try:
                    verdict = await self.check_once(hook)
                except Exception as err:
                    # The deadline passing between pages ends the look; the timeout event follows.
                    past = getattr(err, "kind", None) == "timeout" and self._past_deadline()
                    if not past and not is_retryable(err):
                        yield TriggerEvent(
                            {
                                "status": "error",
                                "message": f"Polling {self.export_type} executions failed: {err}",
                                "http_status": getattr(err, "http_status", None),
                            }
                        )
                        return
                    if not past:
                        self.log.warning(
                            "Polling %s executions failed after the hook's retries (%s); polling again",
                            self.export_type,
                            err,
                        )
                else:
                    if verdict.outcome == "success":
                        yield TriggerEvent({"status": "success", "execution": verdict.execution})
                        return
                    if verdict.outcome == "failed":
                        yield TriggerEvent(
                            {"status": "failed", "execution": verdict.execution, "message": verdict.reason}
                        )
                        return
                    if verdict.reason != last_reason:
                        self.log.info("Waiting: %s", verdict.reason)
                        last_reason = verdict.reason
                wait = self.poll_interval
                if self.deadline is not None:
                    remaining = self.deadline - time.time()
                    if self._past_deadline():
                        when = datetime.fromtimestamp(self.deadline, UTC).isoformat()
                        message = (
                            f"No COMPLETE {self.export_type} execution by the sensor's deadline ({when}); "
                            f"last seen: {last_reason or 'nothing'}"
                        )
                        yield TriggerEvent({"status": "timeout", "message": message})
                        return
                    wait = min(wait, remaining)
                await asyncio.sleep(wait)
        finally:
            await _close(hook)


async def _close(hook: Any) -> None:
    """Close an async hook's session, whichever name its close method has."""
    close = getattr(hook, "close", None) or getattr(hook, "aclose", None)
    if close is not None:
        result = close()
        if asyncio.iscoroutine(result):
            await result


#: The key under which the watcher keeps its cursor in the Asset's state store.
CURSOR_KEY = "completed_cursor"
#: The longest wait between polls after failures, in seconds (the poll interval doubles up to it).
MAX_BACKOFF = 900.0


@dataclass(frozen=True)
class Cursor:
    """How far the watcher has fired: the newest ``updateTime`` it fired for, and the ids at that time.

    An execution is new when it changed after ``time``, or at ``time`` with an id not in ``ids``: the
    service's times have a second's precision, so two executions can share one.
    """

    time: datetime
    ids: frozenset[str] = frozenset()

    def is_new(self, when: datetime, execution_id: str) -> bool:
        return when > self.time or (when == self.time and execution_id not in self.ids)

    def after(self, when: datetime, execution_id: str) -> Cursor:
        """The cursor once the execution ``execution_id`` of ``when`` has fired (``when`` >= ``time``)."""
        return Cursor(when, (self.ids if when == self.time else frozenset()) | {execution_id})

    def to_json(self) -> dict[str, Any]:
        return {"update_time": self.time.isoformat(), "ids": sorted(self.ids)}

    @classmethod
    def from_json(cls, value: Any) -> Cursor | None:
        """The cursor a store holds, or ``None`` when it holds none it can read (then the start point)."""
        if not isinstance(value, dict):
            return None
        try:
            when = parse_timestamp(value.get("update_time"))
        except ValueError:
            return None
        ids = value.get("ids")
        if when is None or not isinstance(ids, list):
            return None
        return cls(when, frozenset(str(i) for i in ids))


class ExecutionCompletedEventTrigger(_ListsExecutions, BaseEventTrigger):
    """Fire one event per execution of an export type that completes: an Asset watcher's trigger.

    Each poll lists the COMPLETE executions newest first, reads back only as far as the cursor, and
    yields one :class:`TriggerEvent` per new one, oldest first, with payload ``{"execution_id",
    "export_type", "update_time"}``. It fires on a change (an execution it has not fired for), never
    on a state that stays true, so a DAG scheduled on it does not run again and again.

    The cursor is kept in the Asset's state store (Airflow 3.3's ``asset_state_store``) and written
    before the event is yielded, so a restarted triggerer fires nothing it fired before; an event lost
    to a crash between the two is made good by the load's ``source="unloaded"``, which loads every
    completed execution its ledger lacks. Without a store (Airflow before 3.3, or one trigger shared by
    several Assets) the cursor lives in memory, starts at ``start_after`` and a warning says so once.

    :param abm_conn_id: connection of type ``abm``; resolved asynchronously in the triggerer.
    :param export_type: export job type, e.g. ``TACTIC_PERFORMANCE``.
    :param asset_name: the name of the Asset watched; it makes the trigger's arguments unique per
        Asset, since two Assets whose triggers had equal arguments would share one trigger (and its
        state store would refuse it).
    :param poll_interval: seconds between polls.
    :param start_after: ISO 8601 time; executions that completed before it never fire. ``None``:
        the time the trigger first runs, so a new watcher does not replay history.
    :param max_consecutive_failures: polls in a row that may fail (after the hook's own retries)
        before the trigger raises, so the triggerer starts it again and the failure is in its log.
    :param settings: ``max_attempts``, ``retry_max_wait``, ``request_timeout`` and ``hook_params``.
    """

    _arguments = ("export_type", "asset_name", "poll_interval", "start_after", "max_consecutive_failures")

    def __init__(
        self,
        *,
        abm_conn_id: str,
        export_type: str,
        poll_interval: float = 60.0,
        asset_name: str | None = None,
        start_after: str | None = None,
        max_consecutive_failures: int = 5,
        **settings: Any,
    ) -> None:
        super().__init__()
        check_positive(poll_interval, "poll_interval")  # in the worker, not in the triggerer
        check_whole(max_consecutive_failures, "max_consecutive_failures", 1)
        self._start = parse_timestamp(start_after)  # fails at DAG parse time, not in the triggerer
        self.export_type = export_type
        self.asset_name = asset_name
        self.poll_interval = float(poll_interval)
        self.start_after = start_after
        self.max_consecutive_failures = int(max_consecutive_failures)
        self.set_hook_settings(abm_conn_id, **(dict.fromkeys(TASK_SETTINGS) | settings))
        self._warned_no_store = False

    def _start_cursor(self) -> Cursor:
        return Cursor(self._start or datetime.now(UTC))

    async def _load_cursor(self) -> Cursor | None:
        """The cursor the Asset's store holds; ``None`` when there is no store to keep one."""
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            return Cursor.from_json(await store.aget(CURSOR_KEY)) or self._start_cursor()
        except ValueError:  # one trigger shared by several Assets: the store cannot say whose
            return None

    async def _save_cursor(self, cursor: Cursor) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            await store.aset(CURSOR_KEY, cursor.to_json())
        except ValueError:
            return

    def _warn_no_store(self) -> None:
        if not self._warned_no_store:
            self._warned_no_store = True
            self.log.warning(
                "No Asset state store for the %s watcher (Airflow before 3.3, or a trigger shared by "
                "several Assets): its cursor is kept in memory, from %s, so a restarted triggerer fires "
                "only for executions that complete after it starts again",
                self.export_type,
                self.start_after or "the time it started",
            )

    async def new_executions(self, hook: AbmAsyncHook, cursor: Cursor) -> list[tuple[datetime, str]]:
        """The COMPLETE executions the cursor has not fired for, oldest first, as ``(time, id)``.

        Reads newest first and stops at the first one the cursor has passed, so a poll reads one page
        when nothing new happened (and never more than the hook's ``max_pages``).
        """
        found: list[tuple[datetime, str]] = []
        pages = hook.iter_executions(self.export_type, state=COMPLETE_STATE, order_by="updateTime desc")
        async for execution in pages:
            when, execution_id = execution_time(execution), execution.get("id")
            if when is None or not execution_id or execution.get("state") != COMPLETE_STATE:
                continue
            if when < cursor.time:
                break
            if cursor.is_new(when, str(execution_id)):
                found.append((when, str(execution_id)))
        return sorted(found)

    def _failure_wait(self, err: BaseException, failures: int) -> float:
        """The wait after the ``failures``-th failed poll in a row: doubling, at least ``Retry-After``."""
        backoff = min(self.poll_interval * 2 ** (failures - 1), max(MAX_BACKOFF, self.poll_interval))
        return max(backoff, float(getattr(err, "retry_after", None) or 0.0))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll for ever, yielding one event per newly completed execution."""
        hook = self._hook()
        try:
            cursor = await self._load_cursor()
            if cursor is None:
                self._warn_no_store()
                cursor = self._start_cursor()
            else:
                await self._save_cursor(cursor)  # a first start's "now" holds over a restart
            failures = 0
            while True:
                try:
                    found = await self.new_executions(hook, cursor)
                except Exception as err:
                    failures += 1
                    if not is_retryable(err):
                        raise RuntimeError(
                            f"Watching {self.export_type} executions failed, and trying again will not "
                            f"help: {err}"
                        ) from err
                    if failures >= self.max_consecutive_failures:
                        raise RuntimeError(
                            f"Watching {self.export_type} executions failed {failures} times in a row "
                            f"(max_consecutive_failures={self.max_consecutive_failures}); last: {err}"
                        ) from err
                    wait = self._failure_wait(err, failures)
                    self.log.warning(
                        "Listing %s executions failed (%d in a row): %s; polling again in %.0f s",
                        self.export_type,
                        failures,
                        err,
                        wait,
                    )
                    await asyncio.sleep(wait)
                    continue
                failures = 0
                for when, execution_id in found:
                    cursor = cursor.after(when, execution_id)
                    await self._save_cursor(cursor)
                    self.log.info("Execution %s of %s completed at %s", execution_id, self.export_type, when)
                    yield TriggerEvent(
                        {
                            "execution_id": execution_id,
                            "export_type": self.export_type,
                            "update_time": when.isoformat(),
                        }
                    )
                await asyncio.sleep(self.poll_interval)
        finally:
            await _close(hook)
