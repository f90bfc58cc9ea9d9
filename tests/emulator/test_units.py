"""In-process checks of the pure pieces: schedule rules, fire times, page tokens, the stored account
(no network)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from abm_emulator.cronrules import fire_times, validate_schedule
from abm_emulator.errors import ApiError
from abm_emulator.model import account_from_json, account_to_json, crm_org_id_for, new_account
from abm_emulator.pagination import encode_token, paginate


@pytest.mark.parametrize(
    ("schedule", "status"),
    [
        ("0 5 * * *", None),
        ("0 5 ? * MON", None),
        ("59 23 31 DEC 7", None),
        ("0 5 * * * *", "INVALID_ARGUMENT"),
        ("0 5 0 * *", "INVALID_ARGUMENT"),
        ("0 5 * * SUN-MON-TUE", "INVALID_ARGUMENT"),
        ("0 ? * * *", "INVALID_ARGUMENT"),
        ("*/5 5 * * *", "FAILED_PRECONDITION"),
        ("0 1,13 * * *", "FAILED_PRECONDITION"),
    ],
)
def test_schedule_classification(schedule, status):
    if status is None:
        assert validate_schedule(schedule) == schedule
    else:
        with pytest.raises(ApiError) as raised:
            validate_schedule(schedule)
        assert raised.value.status == status
        assert [f for f, _ in raised.value.field_violations] == ["schedule"]


def test_fire_times_are_utc_and_bounded():
    start = datetime(2030, 1, 30, 6, tzinfo=UTC)
    until = datetime(2030, 3, 2, 5, tzinfo=UTC)
    assert list(fire_times("0 5 1 * *", start, until)) == [
        datetime(2030, 2, 1, 5, tzinfo=UTC),
        datetime(2030, 3, 1, 5, tzinfo=UTC),
    ]


def test_paginate_resumes_after_the_last_key_even_when_items_are_inserted():
    items = [("a", 1), ("c", 3), ("e", 5)]
    key = lambda item: (item[0],)  # noqa: E731
    page, token = paginate(items, key, page_size=2, page_token=None, params={"q": 1})
    assert page == [("a", 1), ("c", 3)] and token
    items.insert(0, ("b", 2))  # lands before the resume point: not repeated, as with keyset paging
    page, token = paginate(items, key, page_size=2, page_token=token, params={"q": 1})
    assert page == [("e", 5)] and token == ""


def test_paginate_descending_and_token_bound_to_params():
    items = list(range(5))
    key = lambda i: (f"{i:03d}",)  # noqa: E731
    first, token = paginate(items, key, page_size=3, page_token=None, params={}, descending=True)
    second, end = paginate(items, key, page_size=3, page_token=token, params={}, descending=True)
    assert first + second == [4, 3, 2, 1, 0] and end == ""
    with pytest.raises(ApiError, match="pageToken"):
        paginate(items, key, page_size=3, page_token=token, params={"other": True})
    forged = encode_token([1, 2], {})  # right hash, wrong key types
    with pytest.raises(ApiError, match="pageToken"):
        paginate(items, key, page_size=3, page_token=forged, params={})


def test_crm_org_id_is_a_salesforce_org_id_derived_from_the_account_name():
    org = crm_org_id_for("team")
    assert re.fullmatch(r"00D[0-9A-Za-z]{12}", org)
    assert crm_org_id_for("team") == org and crm_org_id_for("other") != org
    assert new_account("team").crm_org_id == org


def test_account_json_keeps_the_crm_org_and_old_files_without_it_still_load():
    account = new_account("team")
    data = account_to_json(account)
    assert data["crm_org_id"] == account.crm_org_id
    assert account_from_json(data).crm_org_id == account.crm_org_id
    data["crm_org_id"] = "00DKEPTASSAVED1"
    assert account_from_json(data).crm_org_id == "00DKEPTASSAVED1"
    del data["crm_org_id"]
    assert account_from_json(data).crm_org_id == account.crm_org_id
