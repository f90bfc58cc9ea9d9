"""``accounts/sync/splitting.py``: a batch refused for its content is halved until the refusals are found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from abm_provider.accounts.sync.splitting import refuses_content, send_splitting
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.results import AccountsResult


def refusal(status: str | None = "INVALID_ARGUMENT", fields: Sequence[str] = ()) -> AbmApiError:
    violations = [{"field": f, "description": "bad"} for f in fields]
    return AbmApiError(
        method="POST",
        path="/accounts/add",
        http_status=400,
        status=status,
        message="refused",
        field_violations=violations,
    )


class FakeService:
    """Refuses (with ``error``) any request holding one of ``bad``; adds the others."""

    def __init__(self, bad: set[str], error: AbmApiError | None = None) -> None:
        self.bad = bad
        self.error = error or refusal()
        self.requests: list[list[str]] = []

    def __call__(self, accounts: Sequence[Mapping[str, Any]]) -> AccountsResult:
        ids = [str(a["id"]) for a in accounts]
        self.requests.append(ids)
        if self.bad.intersection(ids):
            raise self.error
        return AccountsResult(sent=len(ids), applied=len(ids), batches=1)


def accounts(n: int) -> list[dict[str, str]]:
    return [{"id": f"a{i}"} for i in range(n)]


@pytest.mark.parametrize("bad", [set(), {"a0"}, {"a999"}, {"a3", "a500"}, {"a10", "a11", "a12"}])
def test_every_good_account_is_sent_once_and_each_bad_one_is_found(bad: set[str]) -> None:
    service = FakeService(bad)
    out = send_splitting(service, accounts(1000))
    accepted = [i for ids in service.requests if not bad.intersection(ids) for i in ids]
    assert sorted(accepted) == sorted(f"a{i}" for i in range(1000) if f"a{i}" not in bad)
    assert len(accepted) == len(set(accepted))
    assert [f"a{i}" for i, _ in out.refused] == sorted(bad, key=lambda a: int(a[1:]))
    assert out.result.applied == 1000 - len(bad)
    assert all("refused by the service (400)" in why for _, why in out.refused)
    # About 2 log2(n) requests per bad account, not one per account.
    assert len(service.requests) <= 1 + 2 * len(bad) * 10


def test_a_refusal_that_names_another_field_is_raised_not_split() -> None:
    service = FakeService({"a1"}, refusal(fields=["listId"]))
    with pytest.raises(AbmApiError):
        send_splitting(service, accounts(8))
    assert len(service.requests) == 1


@pytest.mark.parametrize(
    ("err", "split"),
    [
        (refusal(), True),
        (refusal(None), True),
        (refusal(fields=["accounts[3].id"]), True),
        (refusal(fields=["accounts[3].id", "listId"]), False),
        (refusal("FAILED_PRECONDITION"), False),
        (AbmApiError(method="POST", path="/x", http_status=503, status=None, message="down"), False),
        (ValueError("not an API error"), False),
    ],
)
def test_only_a_400_about_the_accounts_is_split(err: BaseException, split: bool) -> None:
    assert refuses_content(err) is split
