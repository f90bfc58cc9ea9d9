"""``abm_provider.common.arguments``: each check returns what it accepted and names the argument it
refuses, in the words every caller shares."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from abm_provider.common.arguments import (
    check_choice,
    check_flag,
    check_id,
    check_number,
    check_positive,
    check_text,
    check_whole,
    parse_rendered,
)


@pytest.mark.parametrize("value", ["Q3 accounts", " x ", "ü"])
def test_text_is_kept_as_given(value: str) -> None:
    assert check_text(value, "folder_name") == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "folder_name is empty"),
        ("  \t", "folder_name is empty"),
        (None, "folder_name must be a string, got NoneType None"),
        (5, "folder_name must be a string, got int 5"),
    ],
)
def test_text_refuses_blanks_and_other_types_naming_the_argument(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_text(value, "folder_name")


def test_an_id_is_one_safe_url_path_segment() -> None:
    assert check_id("a1-b2_c3?x", "list_id") == "a1-b2_c3?x"  # encoded by the hook, not refused
    for bad in ("../folders", "x/accounts/remove", "a b", ".."):
        with pytest.raises(ValueError, match="^list_id .* is not a valid identifier"):
            check_id(bad, "list_id")
    with pytest.raises(ValueError, match="^list_id is empty$"):
        check_id("", "list_id")


def test_a_choice_is_one_of_the_choices_and_the_error_says_which() -> None:
    assert check_choice("fail", "if_exists", ("ignore", "fail")) == "fail"
    with pytest.raises(ValueError, match=r"^if_exists must be 'ignore' or 'fail', got 'skip'$"):
        check_choice("skip", "if_exists", ("ignore", "fail"))
    with pytest.raises(ValueError, match=r"^mode must be one of \['a', 'b', 'c'\], got None$"):
        check_choice(None, "mode", ("a", "b", "c"))


@pytest.mark.parametrize(("value", "low", "high"), [(1, 1, 8), (8, 1, 8), (0, 0, None), (10**9, 1, None)])
def test_a_whole_number_within_its_bounds_is_kept(value: int, low: int, high: int | None) -> None:
    assert check_whole(value, "batch_size", low, high) == value


@pytest.mark.parametrize(
    ("value", "low", "high", "message"),
    [
        (0, 1, 1000, "batch_size must be between 1 and 1000, got 0"),
        (1001, 1, 1000, "batch_size must be between 1 and 1000, got 1001"),
        (-1, 0, None, "batch_size must be a whole number >= 0, got -1"),
        (True, 0, None, "batch_size must be a whole number, got True"),
        (2.0, 1, 8, "batch_size must be a whole number, got 2.0"),
        ("4", 1, 8, "batch_size must be a whole number, got '4'"),
    ],
)
def test_a_whole_number_is_refused_outside_its_bounds_or_of_another_type(
    value: Any, low: int, high: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_whole(value, "batch_size", low, high)


def test_positive_takes_any_number_above_zero() -> None:
    assert check_positive(0.5, "poll_interval") == 0.5
    assert check_positive(3, "poll_interval") == 3
    for value in (0, -1.5, math.nan):
        with pytest.raises(ValueError, match="^poll_interval must be positive, got"):
            check_positive(value, "poll_interval")
    for value in (True, "5", None):
        with pytest.raises(ValueError, match="^poll_interval must be a number, got"):
            check_positive(value, "poll_interval")


def test_a_number_from_its_low_bound_is_kept_as_a_float() -> None:
    assert check_number(0, "lock_timeout", 0, unit="seconds") == 0.0
    assert check_number(2.5, "log_retention_days", 0, above=True, unit="days") == 2.5


@pytest.mark.parametrize(
    ("value", "above", "message"),
    [
        (-1, False, "lock_timeout must be a number of seconds >= 0, got -1"),
        (0, True, "lock_timeout must be a number of seconds > 0, got 0"),
        (math.inf, False, "lock_timeout must be a number of seconds >= 0, got inf"),
        (math.nan, False, "lock_timeout must be a number of seconds >= 0, got nan"),
        (True, False, "lock_timeout must be a number of seconds >= 0, got True"),
        ("5", False, "lock_timeout must be a number of seconds >= 0, got '5'"),
    ],
)
def test_a_number_is_refused_below_its_bound_unbounded_or_of_another_type(
    value: Any, above: bool, message: str
) -> None:
    """Infinity is refused: an argument that may be unbounded says so with ``None``."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        check_number(value, "lock_timeout", 0, above=above, unit="seconds")


@pytest.mark.parametrize(
    ("value", "flag"), [(True, True), (False, False), ("true", True), (" FALSE ", False)]
)
def test_a_flag_is_a_bool_or_its_rendered_text(value: Any, flag: bool) -> None:
    assert check_flag(value, "dry_run") is flag


@pytest.mark.parametrize("value", ["maybe", "1", 1, None, ""])
def test_a_flag_refuses_anything_else_naming_the_argument(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^dry_run must be True or False, got"):
        check_flag(value, "dry_run")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("False", False),
        ("None", None),
        ("null", None),
        ("  ", None),
        ("10", 10),
        (" 0.25 ", 0.25),
        ("1e3", 1000.0),
        ("abc", "abc"),
    ],
)
def test_rendered_text_reads_as_the_value_it_spells(text: str, value: Any) -> None:
    read = parse_rendered(text)
    assert read == value and type(read) is type(value)


def test_rendered_infinity_is_a_float_for_the_caller_to_refuse() -> None:
    assert parse_rendered("inf") == math.inf


@pytest.mark.parametrize("value", [3, 0.5, None, True, ["x"]])
def test_a_value_that_is_not_text_is_returned_as_given(value: Any) -> None:
    assert parse_rendered(value) is value
