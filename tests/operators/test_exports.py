"""``CreateExportJobOperator`` (``abm_provider.operators.exports``) against the emulator: local cron checks,
409 handling, lost answers."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.operators.exports import CreateExportJobOperator
from support.export_files import EXPORT_TYPE


def _jobs(abm: Any) -> list[dict[str, Any]]:
    """Export jobs of the test key's account, from the emulator's admin state."""
    accounts = abm.admin("GET", "/_admin/state")["accounts"].values()
    return next(a for a in accounts if abm.api_key in a["apiKeys"])["jobs"]


def _posts(abm: Any) -> list[dict[str, Any]]:
    return [
        r
        for r in abm.requests_seen()
        if r.get("method") == "POST" and str(r.get("path", "")).startswith("/exports/v1/exportJobs")
    ]


def _op(**kwargs: Any) -> CreateExportJobOperator:
    kwargs.setdefault("schedule", "0 5 * * *")
    return CreateExportJobOperator(task_id="ensure_job", export_type=EXPORT_TYPE, **kwargs)


def test_creates_then_ignores_existing(abm: Any, context: dict[str, Any]) -> None:
    first = _op().execute(context)
    assert first["created"] is True
    assert first["type"] == EXPORT_TYPE and first["schedule"] == "0 5 * * *"
    second = _op(schedule="30 6 * * *").execute(context)
    assert second == {"type": EXPORT_TYPE, "created": False, "requested_schedule": "30 6 * * *"}
    jobs = [j for j in _jobs(abm) if j.get("type") == EXPORT_TYPE]
    assert len(jobs) == 1 and jobs[0]["schedule"] == "0 5 * * *"


def test_if_exists_fail(abm: Any, context: dict[str, Any]) -> None:
    _op().execute(context)
    with pytest.raises(AirflowFailException, match="already exists"):
        _op(if_exists="fail").execute(context)


def test_if_exists_fail_creates_when_absent(abm: Any, context: dict[str, Any]) -> None:
    assert _op(if_exists="fail").execute(context)["created"] is True


@pytest.mark.parametrize(
    ("schedule", "rule"),
    [
        ("*/5 * * * *", "minute field must be a single value"),
        ("0 */2 * * *", "hour field must be a single value"),
        ("0 5 * *", "needs exactly five"),
        ("0 5 * 13 *", "month 13 is out of range 1-12"),
    ],
)
def test_bad_schedule_fails_before_any_request(
    abm: Any, context: dict[str, Any], schedule: str, rule: str
) -> None:
    op = _op()
    op.schedule = schedule  # as a rendered template would set it
    with pytest.raises(AirflowFailException, match=rule):
        op.execute(context)
    assert _posts(abm) == []


def test_literal_bad_schedule_fails_at_parse_time() -> None:
    with pytest.raises(ValueError, match="hour field must be a single value"):
        _op(schedule="0 1,13 * * *")


def _lose_the_answer_to_the_next_create(abm: Any) -> None:
    """The next create takes effect, then its answer is a 503."""
    abm.inject_fault(
        origin="api",
        method="POST",
        path="/exports/v1/exportJobs",
        kind="status",
        status=503,
        when="after",
        count=1,
    )


def test_lost_answer_to_create_is_success(abm: Any, context: dict[str, Any]) -> None:
    """A 503 after the create took effect: the hook re-posts, gets 409, and the job is there once."""
    _lose_the_answer_to_the_next_create(abm)
    result = _op(retry_max_wait=0.2).execute(context)
    assert result["type"] == EXPORT_TYPE
    assert len([j for j in _jobs(abm) if j.get("type") == EXPORT_TYPE]) == 1
    assert len(_posts(abm)) == 2


def test_lost_answer_with_if_exists_fail_is_still_ours(abm: Any, context: dict[str, Any]) -> None:
    _lose_the_answer_to_the_next_create(abm)
    assert _op(if_exists="fail", retry_max_wait=0.2).execute(context)["created"] is True
