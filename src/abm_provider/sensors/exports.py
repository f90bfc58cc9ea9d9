"""Waiting for an export execution to complete, in poke, reschedule or deferrable mode.

The service has no callbacks: a client learns that an execution finished by listing executions. The
sensor lists them newest first and lets :class:`~abm_provider.exports.selection.ExecutionSelector`
decide, the same code the trigger runs, so the three modes cannot disagree. A FAILED execution ends
the wait at once (a sensor that keeps waiting on a failure, or reads it as success, is a bug the
Bid Manager sensor has); everything that is not success raises.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from abm_provider.common.arguments import check_text
from abm_provider.compat import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    airflow_conf,
)
from abm_provider.exceptions import AbmApiError
from abm_provider.exports.selection import Verdict, is_retryable, parse_timestamp, select_execution
from abm_provider.operators.base import AbmBaseOperator, check_known
from abm_provider.triggers.exports import ExecutionCompleteTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


def _default_deferrable() -> bool:
    """``[operators] default_deferrable``, as every deferrable operator in Airflow reads it."""
    return bool(airflow_conf().getboolean("operators", "default_deferrable", fallback=False))


class ExecutionCompleteSensor(AbmBaseOperator, BaseSensorOperator):
    """Wait until an execution of ``export_type`` is COMPLETE; XCom is that execution.

    The XCom value is the execution as the service returned it (``id``, ``exportId``, ``state``,
    ``createTime``, ``updateTime``, ``downloadUri``); ``downloadUri`` is a pre-signed link that carries
    no API key. Pass it on as ``DownloadExecutionCsvOperator(execution=sensor.output)``.

    :param export_type: export job type (templated), e.g. ``TACTIC_PERFORMANCE``.
    :param updated_after: only executions updated strictly after this instant count (templated; an
        ISO 8601 string or a datetime, e.g. ``"{{ data_interval_end.isoformat() }}"``); ``None``
        (default) accepts any execution. If the newest execution that counts is FAILED (and no newer
        one is still running) the task fails at once, naming the execution; with ``soft_fail`` it is
        skipped instead, as for a timeout.
    :param deferrable: wait in the triggerer instead of holding a worker slot; default from
        ``[operators] default_deferrable``. The trigger carries the deadline, so ``timeout`` holds
        while deferred.
    :param abm_conn_id: connection of type ``abm``.
    :param max_attempts: attempts per request on 429/5xx/connection errors (hook default if None).
    :param retry_max_wait: longest single back-off wait between a request's attempts in seconds
        (hook default if None); ``max_wait`` is the sensor's own cap on back-off between pokes.
    :param request_timeout: total deadline of one request in seconds (hook default if None).
    :param hook_params: any other hook setting (``max_pages``...), see docs/connection.md.

    Errors the hook still sees after its retries (the service down for longer than the back-off) do
    not fail the sensor: it logs them and looks again at the next poke, within ``timeout``. Errors
    retrying cannot fix (401, 403, 404 for an unknown job type) fail it.
    """

    template_fields: Sequence[str] = ("export_type", "updated_after")

    def __init__(
        self,
        *,
        export_type: str,
        updated_after: str | datetime | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_known(check_text, export_type, "export_type")
        self.export_type = export_type
        self.updated_after = updated_after
        self.deferrable = _default_deferrable() if deferrable is None else bool(deferrable)
        self._deadline: float | None = None

    def _cutoff(self) -> datetime | None:
        try:
            return parse_timestamp(self.updated_after)
        except ValueError as err:
            raise AirflowFailException(f"updated_after: {err}") from err

    def _fail(self, message: str, *, timeout: bool = False) -> NoReturn:
        """Raise the exception Airflow expects, honouring ``soft_fail``/``never_fail`` on any path."""
        if self.soft_fail or self.never_fail:
            raise AirflowSkipException(f"{message} (skipped: soft_fail)")
        if timeout:
            raise AirflowSensorTimeout(message)
        raise AirflowFailException(message)

    def check(self) -> Verdict:
        """One look at the executions, newest first, reading only the pages the answer needs."""
        hook = self.get_hook()
        try:
            executions = hook.iter_executions(
                self.export_type, order_by="updateTime desc", deadline=self._deadline
            )
            return select_execution(executions, self.export_type, self._cutoff())
        finally:
            hook.close()

    def poke(self, context: Context) -> PokeReturnValue:
        """Done with the COMPLETE execution as XCom; raise on a FAILED one; else not yet."""
        try:
            verdict = self.check()
        except AbmApiError as err:
            if not is_retryable(err):
                # Final (401, 403, 404 for an unknown export type...): the same ending as the
                # trigger's error event, so every mode fails alike and soft_fail holds.
                self._fail(f"Could not list {self.export_type} executions: {err}")
            self.log.warning("Could not list %s executions (%s); will look again", self.export_type, err)
            return PokeReturnValue(is_done=False)
        return self._decide(verdict)

    def _decide(self, verdict: Verdict) -> PokeReturnValue:
        if verdict.outcome == "success":
            assert verdict.execution is not None
            self.log.info(
                "%s execution %s is COMPLETE (updateTime %s)",
                self.export_type,
                verdict.execution.get("id"),
                verdict.execution.get("updateTime"),
            )
            return PokeReturnValue(is_done=True, xcom_value=verdict.execution)
        if verdict.outcome == "failed":
            self._fail(f"Export failed: {verdict.reason}")
        self.log.info("Waiting: %s", verdict.reason)
        return PokeReturnValue(is_done=False)

    def execute(self, context: Context) -> Any:
        """Poke/reschedule through the base class; deferrable: look once, then defer to the trigger."""
        # One look reads pages only until the sensor's own timeout, not only between pokes; the
        # trigger carries the same deadline once deferred.
        self._deadline = time.time() + self.timeout
        if not self.deferrable:
            return super().execute(context)
        done = self.poke(context)
        if done.is_done:
            return done.xcom_value
        trigger = ExecutionCompleteTrigger(
            export_type=self.export_type,
            updated_after=self._cutoff_text(),
            poll_interval=max(self.poke_interval, 1.0),
            deadline=self._deadline,
            **self.hook_settings(),
        )
        self.log.info(
            "Deferring until a %s execution completes (deadline in %.0fs)", self.export_type, self.timeout
        )
        # The trigger's own deadline ends the wait with a clear event; Airflow's deferral timeout is a
        # back-stop, a poll later, for a triggerer that died mid-wait.
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + max(self.poke_interval, 1.0) + 60),
        )

    def _cutoff_text(self) -> str | None:
        cutoff = self._cutoff()
        return None if cutoff is None else cutoff.isoformat()

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume from the trigger: the execution on success, an exception on every other event."""
        if not isinstance(event, dict):
            self._fail(f"The trigger for {self.export_type} executions sent no usable event: {event!r}")
        status = event.get("status")
        if status == "success" and isinstance(event.get("execution"), dict):
            return self._decide(Verdict("success", event["execution"], "")).xcom_value
        message = event.get("message") or f"trigger ended with status {status!r}"
        if status == "failed":
            self._fail(f"Export failed: {message}")
        if status == "timeout":
            self._fail(f"Sensor timed out after {self.timeout}s: {message}", timeout=True)
        self._fail(f"Waiting for a {self.export_type} execution failed: {message}")
