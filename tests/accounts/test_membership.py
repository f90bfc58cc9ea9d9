"""The add/remove run (``abm_provider.accounts.membership``) on its own, with no Airflow context.

An in-process hook stands in for the service, so each test states exactly what the service answered.
What a DAG author sees through the operators against the emulator is in
``tests/operators/test_account_lists_emulator.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk import ObjectStoragePath
from airflow.sdk.exceptions import AirflowFailException

from abm_provider.accounts.membership import (
    MembershipResult,
    MembershipRun,
    MembershipSettings,
    SourceArgs,
)
from abm_provider.accounts.sources import IterableSource, TableSource
from abm_provider.accounts.validation import NOT_FOUND_REASON
from abm_provider.common.rejects import TooManyRejects, read_rejects
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.results import AccountsResult


class FakeHook:
    """Answers add and remove requests as the service would, knowing only the ids in ``known``."""

    def __init__(self, known: set[str], log: list[tuple[str, list[str]]], fail_on_call: int = 0) -> None:
        self.known = known
        self.log = log
        self.fail_on_call = fail_on_call
        self.closed = False
        self.threads: set[str] = set()

    def _answer(self, action: str, accounts: list[dict[str, str]]) -> AccountsResult:
        self.threads.add(threading.current_thread().name)
        self.log.append((action, [a["id"] for a in accounts]))
        if self.fail_on_call and len(self.log) == self.fail_on_call:
            raise AbmApiError(
                method="POST", path=f"/accounts/{action}", http_status=401, status=None, message="no"
            )
        missing = [dict(a) for a in accounts if a["id"] not in self.known]
        return AccountsResult(
            sent=len(accounts),
            applied=len(accounts) - len(missing),
            not_found_count=len(missing),
            not_found=missing,
            batches=1,
        )

    def change_membership(
        self, action: str, list_id: str, accounts: list[dict[str, str]], **_: Any
    ) -> AccountsResult:
        return self._answer(action, accounts)

    def close(self) -> None:
        self.closed = True


class Hooks:
    """The hook factory a run takes; keeps every hook it made so a test can look at them."""

    def __init__(self, known: Iterable[str] = (), fail_on_call: int = 0) -> None:
        self.known = set(known)
        self.requests: list[tuple[str, list[str]]] = []
        self.made: list[FakeHook] = []
        self.fail_on_call = fail_on_call

    def __call__(self) -> FakeHook:
        hook = FakeHook(self.known, self.requests, self.fail_on_call)
        self.made.append(hook)
        return hook


def _run(
    rows: Iterable[Mapping[str, Any]], tmp_path: Path, hooks: Hooks, **settings: Any
) -> MembershipResult:
    options = {"action": "add", "list_id": "l-1", "default_crm_org_id": "00D000000000001", **settings}
    run = MembershipRun(MembershipSettings(**options), hooks, logging.getLogger("test.membership"))
    return run.run(IterableSource(rows), ObjectStoragePath(f"file://{tmp_path / 'rejects.csv'}"))


def test_not_found_accounts_are_written_with_the_rows_they_came_from(tmp_path):
    rows = [{"id": "001a"}, {"id": "999x"}, {"id": ""}, {"id": "999x"}, {"id": "001b"}]
    result = _run(rows, tmp_path, Hooks(known={"001a", "001b"}), max_rejected=None)

    assert (result.rows, result.sent, result.applied, result.batches) == (5, 4, 2, 1)
    assert (result.not_found, result.rejected) == (2, 1)
    rejects = read_rejects(tmp_path / "rejects.csv")
    # the same unknown id twice in one batch: each answer is matched to its own row, in order
    assert [(r["record"], r["reason"]) for r in rejects] == [
        ("3", "empty id"),
        ("2", NOT_FOUND_REASON),
        ("4", NOT_FOUND_REASON),
    ]


def test_an_unknown_account_no_row_of_the_batch_holds_is_still_written(tmp_path):
    class Echoing(Hooks):
        def __call__(self) -> FakeHook:
            hook = super().__call__()
            answer = hook._answer

            def odd(action: str, accounts: list[dict[str, str]]) -> AccountsResult:
                result = answer(action, accounts)
                result.not_found = [{"id": "never-sent"}]
                result.not_found_count = 1
                return result

            hook._answer = odd  # type: ignore[method-assign]
            return hook

    result = _run([{"id": "001a"}], tmp_path, Echoing(known={"001a"}), max_not_found=None)
    assert result.not_found == 1
    (reject,) = read_rejects(tmp_path / "rejects.csv")
    assert (reject["record"], reject["line"], reject["raw"]) == ("", "", '{"id":"never-sent"}')


def test_the_summary_names_the_counts_by_action(tmp_path):
    hooks = Hooks(known={"001a"})
    added = _run([{"id": "001a"}], tmp_path, hooks).summary()
    removed = _run([{"id": "001a", "name": "ignored"}], tmp_path, hooks, action="remove").summary()
    assert list(added) == [
        "list_id",
        "rows",
        "sent",
        "added",
        "duplicates",
        "not_found",
        "rejected",
        "batches",
        "rejects_path",
    ]
    assert list(removed) == [
        "list_id",
        "rows",
        "sent",
        "removed",
        "not_found",
        "rejected",
        "batches",
        "rejects_path",
    ]
    assert (added["added"], removed["removed"], removed["rejects_path"]) == (1, 1, None)
    assert hooks.requests == [("add", ["001a"]), ("remove", ["001a"])]


def test_a_bad_mapping_fails_before_any_hook_is_made(tmp_path):
    hooks = Hooks()
    with pytest.raises(AirflowFailException, match="ident"):
        MembershipRun(
            MembershipSettings(action="add", list_id="l-1", column_map={"ident": "x"}),
            hooks,
            logging.getLogger(),
        )
    run = MembershipRun(
        MembershipSettings(action="add", list_id="l-1", column_map={"id": "account_id"}),
        hooks,
        logging.getLogger(),
    )
    with pytest.raises(AirflowFailException, match=r"no column \['account_id'\]"):
        run.run(TableSource(pa.table({"id": ["001a"]})), ObjectStoragePath(f"file://{tmp_path / 'r.csv'}"))
    assert hooks.made == [] and not (tmp_path / "r.csv").exists()


def test_a_count_limit_fails_at_the_row_that_passes_it_after_sending_what_was_formed(tmp_path):
    rows = [{"id": f"001{i}"} for i in range(10)]
    rows[6] = {"id": ""}
    rows[8] = {"id": 5}
    hooks = Hooks(known={r["id"] for r in rows if isinstance(r["id"], str)})
    with pytest.raises(TooManyRejects, match="2 records were rejected by record 9, more than max_rejected=1"):
        _run(rows, tmp_path, hooks, max_rejected=1, batch_size=3)
    assert [ids for _, ids in hooks.requests] == [["0010", "0011", "0012"], ["0013", "0014", "0015"]]
    assert [r["record"] for r in read_rejects(tmp_path / "rejects.csv")] == ["7", "9"]


def test_requests_in_flight_are_counted_in_source_order_and_their_hooks_closed(tmp_path):
    rows = [{"id": f"001{i:03d}" if i % 4 else f"999{i:03d}"} for i in range(1, 201)]
    hooks = Hooks(known={r["id"] for r in rows if r["id"].startswith("001")})
    result = _run(rows, tmp_path, hooks, batch_size=10, max_in_flight=4)
    assert (result.sent, result.batches, result.not_found) == (200, 20, 50)
    records = [int(r["record"]) for r in read_rejects(tmp_path / "rejects.csv")]
    assert records == list(range(4, 201, 4))
    assert hooks.made and all(hook.closed for hook in hooks.made)
    # one hook (one HTTP session) per sending thread, never shared between threads
    assert all(len(hook.threads) == 1 for hook in hooks.made)
    assert len({thread for hook in hooks.made for thread in hook.threads}) == len(hooks.made)


def test_a_service_error_is_raised_as_it_is_with_the_rejects_so_far_kept(tmp_path):
    rows = [{"id": ""}, *({"id": f"001{i}"} for i in range(20))]
    hooks = Hooks(known=set(), fail_on_call=2)
    with pytest.raises(AbmApiError) as err:
        _run(rows, tmp_path, hooks, batch_size=5, max_rejected=None)
    assert not isinstance(err.value, AirflowFailException), "whether it is final is the operator's call"
    assert [r["reason"] for r in read_rejects(tmp_path / "rejects.csv")][0] == "empty id"
    assert all(hook.closed for hook in hooks.made)


def test_the_source_opened_is_the_one_given_and_refuses_what_no_retry_fixes(tmp_path):
    assert isinstance(SourceArgs(accounts=[{"id": "001a"}]).open(), IterableSource)
    assert isinstance(SourceArgs(accounts=pa.table({"id": ["001a"]})).open(), TableSource)
    with pytest.raises(AirflowFailException, match="got dict"):
        SourceArgs(accounts={"id": "001a"}).open()
    with pytest.raises(AirflowFailException, match="set file_format"):
        SourceArgs(accounts_path=str(tmp_path / "accounts.json")).open()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, "Op needs exactly one of accounts, accounts_path or sql"),
        ({"sql": "select 1"}, "sql needs sql_conn_id"),
        ({"accounts": [], "parameters": {}}, "parameters are only used with sql"),
        ({"accounts": [], "file_format": "csv"}, "file_format is only used with accounts_path"),
    ],
)
def test_check_refuses_what_would_be_ignored(given, message):
    with pytest.raises(ValueError, match=message):
        SourceArgs(**given).check("Op")
