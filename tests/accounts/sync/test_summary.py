"""The summary's drift check (``accounts/sync/summary.py``): the service's count against the record.

The check only warns: the sync is done and recorded when it runs, so neither a difference nor a
failure to read the service's count may fail the task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from abm_provider.accounts.sync.summary import check_drift, check_drifts
from abm_provider.exceptions import AbmApiError


class Lists:
    """Stands in for ``AbmHook.iter_account_lists``: the lists the service has, or the error it gives."""

    def __init__(self, *lists: dict[str, Any], error: Exception | None = None) -> None:
        self.lists = lists
        self.error = error
        self.reads = 0

    def iter_account_lists(self) -> Iterator[dict[str, Any]]:
        self.reads += 1
        yield from self.lists
        if self.error is not None:
            raise self.error


def _check(hook: Lists, state_count: int, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    summary: dict[str, Any] = {"state_count": state_count}
    with caplog.at_level(logging.INFO, logger="drift"):
        check_drift(hook, summary, "L1", logging.getLogger("drift"))  # type: ignore[arg-type]
    return summary


def test_agreeing_counts_are_logged_as_agreeing(caplog: pytest.LogCaptureFixture) -> None:
    other = {"id": "L0", "estimatedAccountsCount": "7"}
    summary = _check(Lists(other, {"id": "L1", "estimatedAccountsCount": "12"}), 12, caplog)
    assert summary["service_count"] == 12
    assert "the service and the state agree on 12 accounts" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_difference_is_a_warning_naming_both_counts(caplog: pytest.LogCaptureFixture) -> None:
    summary = _check(Lists({"id": "L1", "estimatedAccountsCount": "15"}), 12, caplog)
    assert summary["service_count"] == 15
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "the service estimates 15 accounts on list L1, the state records 12" in warning.getMessage()


def test_a_list_the_service_does_not_have_is_reported_with_no_count(caplog: pytest.LogCaptureFixture) -> None:
    summary = _check(Lists({"id": "L0", "estimatedAccountsCount": "3"}), 12, caplog)
    assert summary["service_count"] is None
    assert "list L1 was not found among the account lists" in caplog.text


@pytest.mark.parametrize(
    "hook",
    [
        Lists(
            error=AbmApiError(
                method="GET", path="/accountLists", http_status=503, status=None, message="unavailable"
            )
        ),
        Lists({"id": "L1", "estimatedAccountsCount": "about ten"}),
    ],
    ids=["service-error", "unreadable-count"],
)
def test_a_count_that_cannot_be_read_skips_the_check_without_failing(
    hook: Lists, caplog: pytest.LogCaptureFixture
) -> None:
    summary = _check(hook, 12, caplog)
    assert "service_count" not in summary
    assert "Drift check skipped" in caplog.text


def test_several_lists_are_checked_from_one_read_of_the_listing(caplog: pytest.LogCaptureFixture) -> None:
    """An audience sync checks each list of its programme, reading the service's listing once."""
    hook = Lists(
        {"id": "L1", "estimatedAccountsCount": "4"},
        {"id": "L2", "estimatedAccountsCount": "9"},
        {"id": "L3", "estimatedAccountsCount": "1"},
    )
    summaries = {"L1": {"state_count": 4}, "L2": {"state_count": 8}, "L4": {"state_count": 2}}
    with caplog.at_level(logging.INFO, logger="drift"):
        check_drifts(hook, list(summaries.items()), logging.getLogger("drift"))  # type: ignore[arg-type]
    assert hook.reads == 1
    assert {k: v["service_count"] for k, v in summaries.items()} == {"L1": 4, "L2": 9, "L4": None}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "the service estimates 9 accounts on list L2, the state records 8" in warnings[0]
    assert "list L4 was not found" in warnings[1]
