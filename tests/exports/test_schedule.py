"""Local schedule validation: what the service would refuse fails here, naming the rule broken."""

from __future__ import annotations

import pytest

from abm_provider.exports.schedule import InvalidScheduleError, validate_schedule


@pytest.mark.parametrize(
    "schedule",
    [
        "0 5 * * *",
        "30 23 1 * *",
        "0 0 1 1 *",
        "15 6 * * MON-FRI",
        "0 4 ? * 1,3,5",
        "0 4 1-15/2 JAN,jul *",
        "59 23 31 12 7",
        "0 0 */7 * *",
    ],
)
def test_daily_or_slower_schedules_pass(schedule: str) -> None:
    assert validate_schedule(schedule) == schedule


def test_extra_spaces_are_normalised() -> None:
    assert validate_schedule("  0   5 * *  * ") == "0 5 * * *"


@pytest.mark.parametrize(
    ("schedule", "fragment"),
    [
        ("0 5 * *", "has 4 fields; it needs exactly five"),
        ("0 0 5 * * *", "has 6 fields"),
        ("", "has 0 fields"),
        ("@daily", "not a macro; use '0 0 * * *'"),
        ("*/5 * * * *", "minute field must be a single value"),
        ("0,30 5 * * *", "minute field must be a single value"),
        ("0 */6 * * *", "hour field must be a single value"),
        ("0 1-3 * * *", "hour field must be a single value"),
        ("60 5 * * *", "minute 60 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 5 0 * *", "day of month 0 is out of range 1-31"),
        ("0 5 32 * *", "day of month 32 is out of range 1-31"),
        ("0 5 * 13 *", "month 13 is out of range 1-12"),
        ("0 5 * * 8", "day of week 8 is out of range 0-7"),
        ("0 5 * FOO *", "month field has 'FOO'"),
        ("0 5 10-2 * *", "range '10-2' runs backwards"),
        ("0 5 */0 * *", "step '0'"),
        ("0 5 1,,2 * *", "empty item"),
        ("0 5 * ? *", "month field has '?'"),
    ],
)
def test_refused_schedules_name_the_rule(schedule: str, fragment: str) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        validate_schedule(schedule)
    assert fragment in str(info.value)


def test_non_string_is_refused() -> None:
    with pytest.raises(InvalidScheduleError, match="must be a string"):
        validate_schedule(5)
