"""Validation of an export job's schedule and iteration over its fire times.

The service takes five cron fields and refuses a schedule that could fire more than once a calendar
day. Malformed input and too-frequent input are different errors (``INVALID_ARGUMENT`` versus
``FAILED_PRECONDITION``), so parsing is hand-written per field: croniter alone accepts six-field forms,
macros and extensions the service does not, and cannot say which field is at fault. croniter is used
only to walk fire times once a schedule is known to be valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from croniter import croniter

from abm_emulator.errors import ApiError

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NUMBER = re.compile(r"\d{1,2}")


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_start: int = 0
    question_mark: bool = False


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31, question_mark=True),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day of week", 0, 7, _DAYS, 0, question_mark=True),
)


class _Malformed(ValueError):
    pass


def _value(spec: _Field, text: str) -> int:
    upper = text.upper()
    if spec.names and upper in spec.names:
        return spec.names.index(upper) + spec.names_start
    if not _NUMBER.fullmatch(text):
        raise _Malformed(f"{spec.name} field has {text!r}, expected a number {spec.low}-{spec.high}")
    number = int(text)
    if not spec.low <= number <= spec.high:
        raise _Malformed(f"{spec.name} {number} is out of range {spec.low}-{spec.high}")
    return number


def _check_field(spec: _Field, text: str) -> None:
    if text == "?" and spec.question_mark:
        return
    for item in text.split(","):
        base, _, step = item.partition("/")
        if "/" in item and (not step.isdigit() or int(step) == 0):
            raise _Malformed(f"{spec.name} field has a bad step in {item!r}")
        if base == "*":
            continue
        low_text, dash, high_text = base.partition("-")
        low = _value(spec, low_text)
        if dash:
            high = _value(spec, high_text)
            if high < low:
                raise _Malformed(f"{spec.name} range {base!r} runs backwards")


def validate_schedule(schedule: object) -> str:
    """Return the schedule normalised to single spaces, or raise the error the service answers."""
    if not isinstance(schedule, str) or not schedule.strip():
        raise ApiError(
            400, "schedule is required", "INVALID_ARGUMENT", [("schedule", "must be a non-empty string")]
        )
    parts = schedule.split()
    if len(parts) != 5:
        description = f"expected 5 space-separated cron fields, got {len(parts)}"
        raise ApiError(
            400,
            f"Invalid schedule {schedule!r}: {description}",
            "INVALID_ARGUMENT",
            [("schedule", description)],
        )
    try:
        for spec, text in zip(_FIELDS, parts, strict=True):
            _check_field(spec, text)
    except _Malformed as exc:
        raise ApiError(
            400, f"Invalid schedule {schedule!r}: {exc}", "INVALID_ARGUMENT", [("schedule", str(exc))]
        ) from None
    for spec, text in zip(_FIELDS[:2], parts[:2], strict=True):
        if not _NUMBER.fullmatch(text):
            description = (
                f"{spec.name} must be a single value so the job runs at most once a day, got {text!r}"
            )
            raise ApiError(
                400,
                f"Schedule {schedule!r} runs more often than daily",
                "FAILED_PRECONDITION",
                [("schedule", description)],
            )
    normalised = " ".join(parts)
    if not croniter.is_valid(_for_croniter(normalised)):
        raise ApiError(
            400,
            f"Invalid schedule {schedule!r}",
            "INVALID_ARGUMENT",
            [("schedule", "not a valid cron expression")],
        )
    return normalised


def _for_croniter(schedule: str) -> str:
    return " ".join("*" if p == "?" else p for p in schedule.split())


def fire_times(schedule: str, after: datetime, until: datetime) -> Iterator[datetime]:
    """Fire times strictly after ``after`` and at or before ``until``, in UTC."""
    iterator = croniter(_for_croniter(schedule), after)
    while True:
        moment: datetime = iterator.get_next(datetime)
        if moment > until:
            return
        yield moment
