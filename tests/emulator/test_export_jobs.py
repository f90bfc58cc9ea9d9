"""Export Jobs v1: creation rules, the executions listing (paging, order, filter) and the lifecycle."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from emulator_api import error_of, violated_fields

DAY = 86_400


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_create_job_echoes_the_resource(api):
    response = api.post("/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": "0  5 1 * *"})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"type", "schedule", "createTime", "updateTime"}
    assert body["type"] == "TACTIC_PERFORMANCE" and body["schedule"] == "0 5 1 * *"
    assert body["createTime"].endswith("Z")


def test_second_job_of_a_type_is_409_but_other_type_is_fine(api):
    api.job("TACTIC_PERFORMANCE")
    again = api.post("/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": "0 6 * * *"})
    assert again.status_code == 409 and error_of(again)["status"] == "ALREADY_EXISTS"
    assert (
        api.post(
            "/exports/v1/exportJobs", {"type": "DISPLAY_TACTIC_ACCOUNT_PERFORMANCE", "schedule": "0 6 * * *"}
        ).status_code
        == 200
    )


@pytest.mark.parametrize(
    "schedule",
    [
        "0 5 * *",
        "0 5 * * * *",
        "60 5 * * *",
        "0 24 * * *",
        "0 5 32 * *",
        "0 5 * 13 *",
        "0 5 * * 8",
        "x 5 * * *",
        "0 5 * * MOO",
        "0 5 */0 * *",
        "0 5 5-1 * *",
        "@daily",
        "",
    ],
)
def test_malformed_schedule_is_invalid_argument_on_schedule(api, schedule):
    response = api.post("/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": schedule})
    assert response.status_code == 400
    assert error_of(response)["status"] == "INVALID_ARGUMENT"
    assert violated_fields(response) == ["schedule"]


@pytest.mark.parametrize(
    "schedule", ["* 5 * * *", "0 * * * *", "0,30 5 * * *", "0 5-6 * * *", "0 */12 * * *"]
)
def test_more_often_than_daily_is_failed_precondition_on_schedule(api, schedule):
    response = api.post("/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": schedule})
    assert response.status_code == 400
    assert error_of(response)["status"] == "FAILED_PRECONDITION"
    assert violated_fields(response) == ["schedule"]


@pytest.mark.parametrize("schedule", ["0 5 1 * *", "30 23 * * MON-FRI", "0 0 ? * 7", "15 3 1,15 JAN,JUL *"])
def test_daily_or_slower_schedules_are_accepted(api, schedule):
    assert (
        api.post("/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": schedule}).status_code
        == 200
    )


def test_unknown_type_is_400_and_unknown_job_is_404(api):
    response = api.post("/exports/v1/exportJobs", {"type": "EVERYTHING", "schedule": "0 5 * * *"})
    assert response.status_code == 400 and violated_fields(response) == ["type"]
    missing = api.executions("TACTIC_PERFORMANCE")
    assert missing.status_code == 404 and error_of(missing)["status"] == "NOT_FOUND"


def test_execution_moves_pending_running_complete_on_the_emulated_clock(emulator, api):
    api.job()
    fired = emulator.fire("TACTIC_PERFORMANCE", pending_seconds=60, running_seconds=120)
    assert fired["state"] == "PENDING" and "downloadUri" not in fired
    emulator.advance(90)
    [running] = api.all_executions()
    assert running["state"] == "RUNNING" and "downloadUri" not in running
    assert _t(running["updateTime"]) - _t(running["createTime"]) == timedelta(seconds=60)
    emulator.advance(120)
    [done] = api.all_executions()
    assert done["state"] == "COMPLETE" and done["downloadUri"].startswith(emulator.storage_url + "/")
    assert set(done) == {"id", "exportId", "state", "createTime", "updateTime", "downloadUri"}
    assert done["exportId"] == "TACTIC_PERFORMANCE" and done["id"] == fired["id"]


def test_failed_execution_has_no_download_uri(emulator, api):
    api.job()
    emulator.fire("TACTIC_PERFORMANCE", outcome="FAILED")
    [failed] = api.all_executions(filter="state=FAILED")
    assert failed["state"] == "FAILED" and "downloadUri" not in failed


def test_cron_fires_daily_in_utc(emulator, api):
    now = _t(emulator.clock()["now"])
    next_five = (now + timedelta(days=1)).replace(hour=5, minute=0, second=0, microsecond=0)
    if next_five - now > timedelta(days=1):
        next_five -= timedelta(days=1)
    api.job(schedule="0 5 * * *")
    emulator.advance((next_five - now).total_seconds() + 3 * DAY - 1)  # three 05:00 fires, 1 s short of a 4th
    runs = api.all_executions(orderBy="createTime")
    assert [_t(r["createTime"]) for r in runs] == [next_five + timedelta(days=d) for d in range(3)]
    assert all(r["state"] == "COMPLETE" for r in runs)


def _states(emulator, api, outcomes):
    api.job()
    for outcome in outcomes:
        emulator.fire("TACTIC_PERFORMANCE", outcome=outcome)
        emulator.advance(1)


def test_filtered_pages_can_be_empty_but_still_carry_a_token(emulator, api):
    _states(emulator, api, ["FAILED", "FAILED", "FAILED", "FAILED", "COMPLETE"])
    pages, token = [], ""
    while True:
        params = {"pageSize": 2, "filter": "status=COMPLETE", **({"pageToken": token} if token else {})}
        body = api.executions(**params).json()
        pages.append([e["state"] for e in body["exportJobExecutions"]])
        token = body["nextPageToken"]
        if not token:
            break
    assert pages == [[], [], ["COMPLETE"]]


def test_order_by_and_descending(emulator, api):
    _states(emulator, api, ["COMPLETE", "FAILED", "COMPLETE"])
    ascending = [e["id"] for e in api.all_executions(orderBy="createTime asc", pageSize=1)]
    descending = [e["id"] for e in api.all_executions(orderBy="updateTime desc", pageSize=2)]
    assert len(ascending) == 3 and descending == ascending[::-1]
    assert [e["id"] for e in api.all_executions()] == ascending


def test_page_size_defaults_to_100_and_is_clamped(emulator, api):
    api.job()
    for _ in range(105):
        emulator.fire("TACTIC_PERFORMANCE", outcome="FAILED")
    first = api.executions().json()
    assert len(first["exportJobExecutions"]) == 100 and first["nextPageToken"]
    clamped = api.executions(pageSize=1000).json()
    assert len(clamped["exportJobExecutions"]) == 100
    rest = api.executions(pageSize=1000, pageToken=clamped["nextPageToken"]).json()
    assert len(rest["exportJobExecutions"]) == 5 and rest["nextPageToken"] == ""


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"pageSize": -1}, "pageSize"),
        ({"pageSize": "ten"}, "pageSize"),
        ({"pageSize": "1.5"}, "pageSize"),
        ({"orderBy": "name"}, "orderBy"),
        ({"orderBy": "updateTime sideways"}, "orderBy"),
        ({"filter": "status!=COMPLETE"}, "filter"),
        ({"filter": "state=DONE"}, "filter"),
        ({"pageToken": "garbage!"}, "pageToken"),
    ],
)
def test_bad_listing_parameters_are_400_naming_the_parameter(api, params, field):
    api.job()
    response = api.executions(**params)
    assert response.status_code == 400
    assert error_of(response)["status"] == "INVALID_ARGUMENT"
    assert violated_fields(response) == [field]


def test_page_token_is_bound_to_the_other_query_parameters(emulator, api):
    _states(emulator, api, ["COMPLETE", "COMPLETE", "COMPLETE"])
    token = api.executions(pageSize=1, filter="status=COMPLETE").json()["nextPageToken"]
    assert token
    assert api.executions(pageSize=2, filter="status=COMPLETE", pageToken=token).status_code == 200
    changed = api.executions(pageSize=1, filter="status=FAILED", pageToken=token)
    assert changed.status_code == 400 and violated_fields(changed) == ["pageToken"]
    reordered = api.executions(
        pageSize=1, filter="status=COMPLETE", orderBy="updateTime desc", pageToken=token
    )
    assert reordered.status_code == 400


def test_job_not_read_for_30_days_expires(emulator, api):
    api.job(schedule="0 5 1 1 *")  # yearly, so no run interferes
    emulator.advance(29 * DAY)
    assert api.executions().status_code == 200  # a read: the 30 days start again
    emulator.advance(29 * DAY)
    assert api.executions().status_code == 200
    emulator.advance(31 * DAY)
    assert api.executions().status_code == 404
    assert (
        api.post(
            "/exports/v1/exportJobs", {"type": "TACTIC_PERFORMANCE", "schedule": "0 5 * * *"}
        ).status_code
        == 200
    )
