"""Waiting for an export execution in the triggerer.

Which execution ends the wait is decided by :class:`~abm_provider.exports.selection.ExecutionSelector`,
shared with the sensor. The trigger serializes primitives only (connection id, type, cut-off, poll
interval, deadline): the API key stays in the connection, which the async hook resolves in the
triggerer. It carries its own deadline because a deferred task otherwise loses the sensor's
``timeout`` (apache/airflow#61467).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from abm_provider.hooks._settings import TASK_SETTINGS, TaskSettings

if TYPE_CHECKING:
    from abm_provider.hooks.abm import AbmAsyncHook

from abm_provider.exports.selection import (
    ExecutionSelector,
    Verdict,
    is_retryable,
    parse_timestamp,
    select_execution,
    select_execution_async,
)

__all__ = ["ExecutionCompleteTrigger", "ExecutionSelector", "select_execution"]


class ExecutionCompleteTrigger(TaskSettings, BaseTrigger):
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
    :param retry_max_wait: longest single back-off wait in seconds (hook default if None); a trigger
        serialized by the previous release passes it as ``max_wait``, still accepted.
    :param request_timeout: total deadline of one request in seconds (hook default if None).
    :param hook_params: any other hook setting by name (``max_pages``...), numbers only.

    The deadline is also checked between the pages of one look, so a service that keeps handing out
    pages cannot hold the trigger past it.
    """

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
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        # Fail at construction (in the worker, before deferring) rather than in the triggerer.
        self._cutoff = parse_timestamp(updated_after)
        self.export_type = export_type
        self.updated_after = updated_after
        self.poll_interval = float(poll_interval)
        self.deadline = None if deadline is None else float(deadline)
        # max_wait: the name a trigger serialized by the previous release carries; no warning, since
        # the row is not the DAG author's to change.
        given = dict.fromkeys(TASK_SETTINGS) | settings
        earlier = given.pop("max_wait", None)
        if given["retry_max_wait"] is None:
            given["retry_max_wait"] = earlier
        self.set_hook_settings(abm_conn_id, **given)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and primitive kwargs only: no key, no hook, no datetime objects."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "export_type": self.export_type,
                "updated_after": self.updated_after,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                **self.hook_settings(),
            },
        )

    def _hook(self) -> AbmAsyncHook:
        from abm_provider.hooks.abm import AbmAsyncHook

        return AbmAsyncHook(self.abm_conn_id, **self.hook_kwargs())

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
            close = getattr(hook, "close", None) or getattr(hook, "aclose", None)
            if close is not None:
                result = close()
                if asyncio.iscoroutine(result):
                    await result
