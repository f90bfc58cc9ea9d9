"""Local validation of an export job's schedule, so a bad cron fails before any request is sent.

The service takes a five-field cron expression (minute, hour, day of month, month, day of week, in
UTC) and refuses one that could fire more than once a calendar day. Its error only says the field was
refused; checking here names the exact rule, costs no request, and fails the DAG at the first task
instead of after the service's retries. The rule chosen by the service (and mirrored here) is that
minute and hour are each one plain number; the other three fields take the usual cron syntax (``*``,
``?`` for the day fields, lists, ranges, steps, and month/day names).

This is a hand-written parser rather than ``croniter`` on purpose: croniter accepts six- and
seven-field forms, ``@daily``-style macros and extensions (``L``, ``W``, ``#``) that the service
does not document, and its errors do not say which field is at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class InvalidScheduleError(ValueError):
    """A schedule the service would refuse; the message names the field and the rule broken."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_start: int = 0
    question_mark: bool = False


_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")

FIELDS: tuple[_Field, ...] = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31, question_mark=True),
    _Field("month", 1, 12, names=_MONTHS, names_start=1),
    # 0 and 7 are both Sunday, as in every common cron.
    _Field("day of week", 0, 7, names=_DAYS, names_start=0, question_mark=True),
)

_MACRO_HINTS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
}
_NUMBER = re.compile(r"\d{1,2}")


def _value(field: _Field, text: str, schedule: str) -> int:
    """One number or month/day name of ``field``, checked against the field's range."""
    upper = text.upper()
    if field.names and upper in field.names:
        return field.names.index(upper) + field.names_start
    if not _NUMBER.fullmatch(text):
        allowed = f"a number {field.low}-{field.high}"
        if field.names:
            allowed += f" or a name ({', '.join(field.names)})"
        raise InvalidScheduleError(
            f"schedule {schedule!r}: {field.name} field has {text!r}; expected {allowed}"
        )
    number = int(text)
    if not field.low <= number <= field.high:
        raise InvalidScheduleError(
            f"schedule {schedule!r}: {field.name} {number} is out of range {field.low}-{field.high}"
        )
    return number


def _check_general(field: _Field, text: str, schedule: str) -> None:
    """Validate a day-of-month, month or day-of-week field: ``*``, ``?``, lists, ranges and steps."""
    if text == "?" and field.question_mark:
        return
    for item in text.split(","):
        if not item:
            raise InvalidScheduleError(
                f"schedule {schedule!r}: {field.name} field {text!r} has an empty item"
            )
        base, slash, step = item.partition("/")
        if slash and (not _NUMBER.fullmatch(step) or int(step) == 0):
            raise InvalidScheduleError(
                f"schedule {schedule!r}: {field.name} step {step!r} in {item!r} must be a positive number"
            )
        if base == "*":
            continue
        start_text, dash, end_text = base.partition("-")
        start = _value(field, start_text, schedule)
        if dash:
            end = _value(field, end_text, schedule)
            if start > end:
                raise InvalidScheduleError(
                    f"schedule {schedule!r}: {field.name} range {base!r} runs backwards ({start} > {end})"
                )


def _check_single(field: _Field, text: str, schedule: str) -> None:
    """Minute and hour: one plain number, which is what keeps the job at most daily."""
    if not _NUMBER.fullmatch(text):
        raise InvalidScheduleError(
            f"schedule {schedule!r}: the {field.name} field must be a single value "
            f"({field.low}-{field.high}) because an export job may run at most once per day; got {text!r}"
        )
    _value(field, text, schedule)


def validate_schedule(schedule: object) -> str:
    """Return the schedule normalised to single spaces, or raise :class:`InvalidScheduleError`.

    Rules, each named in the error: a string of exactly five space-separated fields; every value within
    its field's range (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or JAN-DEC, day of week
    0-7 or SUN-SAT); minute and hour each a single value, so the job fires at most once per day.
    """
    if not isinstance(schedule, str):
        raise InvalidScheduleError(f"schedule must be a string, got {type(schedule).__name__}")
    text = schedule.strip()
    if text.lower() in _MACRO_HINTS:
        raise InvalidScheduleError(
            f"schedule {schedule!r}: the service takes five cron fields, not a macro; "
            f"use {_MACRO_HINTS[text.lower()]!r}"
        )
    parts = text.split()
    if len(parts) != len(FIELDS):
        raise InvalidScheduleError(
            f"schedule {schedule!r} has {len(parts)} fields; it needs exactly five "
            "(minute hour day-of-month month day-of-week), e.g. '0 5 * * *'"
        )
    for field, part in zip(FIELDS[:2], parts[:2], strict=True):
        _check_single(field, part, schedule)
    for field, part in zip(FIELDS[2:], parts[2:], strict=True):
        _check_general(field, part, schedule)
    return " ".join(parts)
