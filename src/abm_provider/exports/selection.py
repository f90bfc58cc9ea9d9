"""Which export execution ends a wait: the rule the sensor and the trigger share.

The sensor (poke and reschedule modes) and the trigger (deferrable mode) must agree on when the wait
is over, so the decision lives in one place, :class:`ExecutionSelector`, which both feed with
executions newest first. It is a small state machine rather than a function over a list so the
trigger can feed it from an async page iterator and both can stop reading pages as soon as the answer
is known.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    pass

#: States of an execution that has not finished; anything else unknown is treated the same way, so a
#: new state the service adds makes the sensor wait (bounded by its timeout) rather than succeed.
IN_PROGRESS_STATES = frozenset({"PENDING", "RUNNING", "STATE_UNSPECIFIED"})
COMPLETE_STATE = "COMPLETE"
#: Terminal states that mean no file will come; only FAILED is in the service's rules, the others are
#: accepted because the real service may name a cancellation differently.
FAILED_STATES = frozenset({"FAILED", "CANCELLED", "CANCELED", "EXPIRED"})

Outcome = Literal["success", "failed", "waiting"]

_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_timestamp(value: Any) -> datetime | None:
    """An aware UTC datetime from an RFC 3339 string or a datetime; ``None`` for empty input.

    Naive values are taken as UTC (the service and Airflow's data intervals are UTC); fractions
    beyond microseconds (the service's gateway may send nanoseconds) are cut, not rounded.
    """
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        text = value.strip()
        if "." in text:  # most timestamps have no fraction, and this runs on every poll
            text = _FRACTION.sub(r"\1", text)
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError as err:
            raise ValueError(f"not an ISO 8601 / RFC 3339 timestamp: {value!r}") from err
    else:
        raise ValueError(f"expected an ISO 8601 timestamp or a datetime, got {type(value).__name__}")
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def execution_time(execution: Mapping[str, Any]) -> datetime | None:
    """When an execution last changed: ``updateTime``, else ``createTime``; ``None`` if unreadable."""
    for key in ("updateTime", "createTime"):
        try:
            parsed = parse_timestamp(execution.get(key))
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one look at the executions decided, with the execution it is about and a reason to log."""

    outcome: Outcome
    execution: dict[str, Any] | None
    reason: str


class ExecutionSelector:
    """Decide from executions fed newest first (``orderBy=updateTime desc``) whether the wait is over.

    Only executions updated strictly after ``updated_after`` count (all of them when it is ``None``).
    Among those, newest first:

    - a ``COMPLETE`` one wins: success with that execution;
    - a failed one (``FAILED``) fails the wait, unless a newer execution is still in progress (a re-run
      that may yet complete), in which case the wait goes on;
    - ``PENDING``/``RUNNING`` (and unknown states) are remembered and skipped.

    ``feed`` returns a verdict as soon as it is certain, so callers stop paging; the first execution
    at or before the cut-off ends the search, as every later one is older still.
    """

    def __init__(self, export_type: str, updated_after: datetime | None) -> None:
        self.export_type = export_type
        self.updated_after = updated_after
        self.seen = 0
        self.in_progress: dict[str, Any] | None = None
        self._done: Verdict | None = None

    def feed(self, execution: Mapping[str, Any]) -> Verdict | None:
        """Take the next (older) execution; a verdict when the answer is known, else ``None``."""
        if self._done is not None:
            return self._done
        updated = execution_time(execution)
        if self.updated_after is not None:
            if updated is None:
                return None
            if updated <= self.updated_after:
                self._done = self._waiting()
                return self._done
        self.seen += 1
        state = str(execution.get("state") or "").upper()
        item = dict(execution)
        if state == COMPLETE_STATE:
            self._done = Verdict("success", item, f"execution {item.get('id')} is COMPLETE")
        elif state in FAILED_STATES:
            if self.in_progress is not None:
                self._done = Verdict(
                    "waiting",
                    self.in_progress,
                    f"execution {item.get('id')} is {state}, but the newer execution "
                    f"{self.in_progress.get('id')} is still {self.in_progress.get('state')}",
                )
            else:
                self._done = Verdict(
                    "failed",
                    item,
                    f"the newest {self.export_type} execution{self._after_text()}, "
                    f"{item.get('id')}, is {state} (updateTime {item.get('updateTime')})",
                )
        elif self.in_progress is None:
            self.in_progress = item
        return self._done

    def result(self) -> Verdict:
        """The verdict once every execution has been fed (no more pages)."""
        if self._done is not None:
            return self._done
        return self._waiting()

    def _after_text(self) -> str:
        return f" updated after {self.updated_after.isoformat()}" if self.updated_after else ""

    def _waiting(self) -> Verdict:
        if self.in_progress is not None:
            return Verdict(
                "waiting",
                self.in_progress,
                f"{self.export_type} execution {self.in_progress.get('id')} is "
                f"{self.in_progress.get('state')}",
            )
        return Verdict("waiting", None, f"no {self.export_type} execution{self._after_text()} yet")


def select_execution(
    executions: Iterable[Mapping[str, Any]], export_type: str, updated_after: datetime | None
) -> Verdict:
    """Run :class:`ExecutionSelector` over a (lazy) newest-first iterable, stopping once decided."""
    selector = ExecutionSelector(export_type, updated_after)
    for execution in executions:
        if selector.feed(execution) is not None:
            break
    return selector.result()


async def select_execution_async(
    executions: AsyncIterator[dict[str, Any]], export_type: str, updated_after: datetime | None
) -> Verdict:
    """The same as :func:`select_execution` for the async hook's page iterator."""
    selector = ExecutionSelector(export_type, updated_after)
    try:
        async for execution in executions:
            if selector.feed(execution) is not None:
                break
    finally:
        aclose = getattr(executions, "aclose", None)
        if aclose is not None:
            await aclose()
    return selector.result()


def is_retryable(err: BaseException) -> bool:
    """Whether an error after the hook's own retries is still worth polling again for.

    The hook retries 429/5xx and dropped connections itself; if the service is still unavailable when
    it gives up, a sensor that has hours left should keep waiting rather than fail. What the hook
    classes as final (401, 404 for an unknown job type, a listing that would not end) ends the wait.
    """
    return bool(getattr(err, "transient", False))
