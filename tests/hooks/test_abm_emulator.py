"""``AbmHook`` against the emulator, a real HTTP service in its own process.

Every endpoint method, the error statuses a DAG author meets, pagination through empty pages, and the
retry rules (Retry-After honoured, 5xx on a create reconciled without a duplicate, 400/401 never
repeated), checked through the emulator's own state and request log rather than the hook's word.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.abm import AbmHook
from abm_provider.hooks.results import BatchResult
from support.emulator_log import seen

FOLDERS = "/accountLists/v2/folders"
LISTS = "/accountLists/v2/accountLists"
JOBS = "/exports/v1/exportJobs"
TYPE = "TACTIC_PERFORMANCE"


def _state(abm: Any) -> dict[str, Any]:
    return abm.admin("GET", "/_admin/state")


def _find_all(node: Any, key: str) -> list[dict[str, Any]]:
    """Every dict under ``key`` anywhere in the admin state, whatever its nesting."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and isinstance(v, list):
                found.extend(x for x in v if isinstance(x, dict))
            elif k == key and isinstance(v, dict):
                found.extend(x for x in v.values() if isinstance(x, dict))
            else:
                found.extend(_find_all(v, key))
    elif isinstance(node, list):
        for item in node:
            found.extend(_find_all(item, key))
    return found


def _named(items: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [
        i
        for i in items
        if name in (i.get("name"), i.get("displayName"), i.get("folderName"), i.get("listName"))
    ]


def _account(i: int, *, known: bool = True) -> dict[str, str]:
    account_id = f"001{i:015d}" if known else f"999UNKNOWN{i:08d}"
    return {"id": account_id, "name": f"Account {i}", "crmOrgId": "00D000000000001", "crmType": "SALESFORCE"}


def _member_ids(abm: Any, list_id: str) -> set[str]:
    members = abm.members(list_id)
    if isinstance(members, dict):
        members = members["members"]
    return {m["id"] for m in members}


# --- connection ---------------------------------------------------------------------------------


def test_connection_test_passes_with_the_key_and_names_the_failure_without_it(
    abm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok, message = AbmHook().test_connection()
    assert ok, message
    assert abm.base_url in message
    wrong = {"conn_type": "abm", "host": abm.base_url, "password": "wrong-key-123456"}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_WRONG", json.dumps(wrong))
    ok, message = AbmHook("abm_wrong").test_connection()
    assert not ok
    assert "refused the API key" in message and "401 UNAUTHENTICATED" in message
    assert "wrong-key-123456" not in message
    unreachable = {"conn_type": "abm", "host": "http://127.0.0.1:9", "password": "k" * 8}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DOWN", json.dumps(unreachable))
    ok, message = AbmHook("abm_down").test_connection()
    assert not ok and "Could not reach http://127.0.0.1:9" in message


def test_connection_test_names_the_users_connection_but_not_the_uis_throwaway_id(
    abm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The UI's Test button runs the hook under a random 8-character id exported as AIRFLOW_CONN_<ID>."""
    wrong = {"conn_type": "abm", "host": abm.base_url, "password": "wrong-key-123456"}
    for conn_id in ("abm_wrong", "pY3EeVWf"):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(wrong))
    ok, mine = AbmHook("abm_wrong").test_connection()
    assert not ok and mine.startswith(f"{abm.base_url} refused the API key of connection 'abm_wrong'")
    assert "check the API key (password) of connection 'abm_wrong'" in mine
    ok, tested = AbmHook("pY3EeVWf").test_connection()
    assert not ok and tested.startswith(f"{abm.base_url} refused the API key: ")
    assert "check the API key (password) of this connection" in tested
    assert "pY3EeVWf" not in tested and "wrong-key-123456" not in tested
    monkeypatch.setenv("AIRFLOW_CONN_PY3EEVWF", json.dumps({**wrong, "password": abm.api_key}))
    ok, passed = AbmHook("pY3EeVWf").test_connection()
    assert ok and passed == f"Connected to {abm.base_url}: the API key was accepted"
    monkeypatch.setenv("AIRFLOW_CONN_PY3EEVWF", json.dumps({**wrong, "password": ""}))
    ok, unusable = AbmHook("pY3EeVWf").test_connection()
    assert (
        not ok and unusable == "Not tested: this connection has no API key: put the key in its password field"
    )


def test_basic_auth_is_accepted(abm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {
        "conn_type": "abm",
        "host": abm.base_url,
        "password": abm.api_key,
        "extra": {"auth_type": "basic"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_ABM_BASIC", json.dumps(conn))
    hook = AbmHook("abm_basic")
    folder = hook.create_folder("basic-auth folder")
    assert [f["uuid"] for f in hook.iter_folders()] == [folder["folderId"]]
    sent = seen(abm, method="POST", path=FOLDERS)
    assert sent and all((e.get("headers") or {}) for e in sent)


# --- folders and lists -----------------------------------------------------------------------------


def test_folders_are_created_and_listed_across_pages(abm: Any, hook: AbmHook) -> None:
    created = [hook.create_folder(f"folder {i}", "PUBLIC" if i % 2 else "READ_ONLY") for i in range(5)]
    assert all(set(c) >= {"folderId", "displayName", "folderAccess"} for c in created)
    listed = list(hook.iter_folders(page_size=2))
    assert sorted(f["uuid"] for f in listed) == sorted(c["folderId"] for c in created)
    assert {f["name"] for f in listed} == {f"folder {i}" for i in range(5)}
    pages = seen(abm, method="GET", path=FOLDERS)
    assert len(pages) >= 3, "five folders in pages of two take three requests"


def test_lists_are_created_in_a_folder_and_filtered_by_folder(abm: Any, hook: AbmHook) -> None:
    first = hook.create_folder("first")["folderId"]
    second = hook.create_folder("second")["folderId"]
    a = hook.create_account_list("list a", first)
    b = hook.create_account_list("list b", second)
    assert a["listName"] == "list a" and a["folderId"] == first and a["listId"]
    in_first = list(hook.iter_account_lists([first]))
    assert [item["id"] for item in in_first] == [a["listId"]]
    everything = {item["id"] for item in hook.iter_account_lists(page_size=1)}
    assert everything == {a["listId"], b["listId"]}
    with pytest.raises(AbmApiError) as info:
        hook.create_account_list("orphan", "00000000-0000-0000-0000-000000000000")
    assert info.value.http_status == 404 and info.value.status == "NOT_FOUND"
    with pytest.raises(ValueError, match="folder_ids must be a list"):
        list(hook.iter_account_lists("abc"))  # type: ignore[arg-type]


# --- membership ---------------------------------------------------------------------------------


def test_add_accounts_batches_counts_and_keeps_not_found(abm: Any, hook: AbmHook) -> None:
    list_id = hook.create_account_list("members", hook.create_folder("f")["folderId"])["listId"]
    accounts = (_account(i, known=i % 50 != 7) for i in range(2345))  # a generator: read lazily
    batches: list[BatchResult] = []
    result = hook.add_accounts(list_id, accounts, on_batch=batches.append)
    assert [b.sent for b in batches] == [1000, 1000, 345]
    assert [b.index for b in batches] == [0, 1, 2]
    unknown = {_account(i, known=False)["id"] for i in range(2345) if i % 50 == 7}
    assert result.sent == 2345 and result.batches == 3
    assert result.not_found_count == len(unknown) == 47
    assert {a["id"] for a in result.not_found} == unknown
    assert result.applied == 2345 - 47 and result.duplicates == 0
    assert len(_member_ids(abm, list_id)) == 2298
    assert sum(len(b.successful) for b in batches) == 2298
    posts = seen(abm, method="POST", path=f"{LISTS}/{list_id}/accounts/add")
    assert len(posts) == 3

    again = hook.add_accounts(list_id, [_account(i) for i in range(10, 20)], keep_not_found=False)
    assert (again.applied, again.duplicates, again.not_found) == (0, 10, [])


def test_keep_not_found_false_counts_without_keeping(hook: AbmHook) -> None:
    list_id = hook.create_account_list("l", hook.create_folder("f")["folderId"])["listId"]
    result = hook.add_accounts(list_id, [_account(i, known=False) for i in range(30)], keep_not_found=False)
    assert result.not_found_count == 30 and result.not_found == []


def test_remove_accounts_counts_removed_and_not_on_list(abm: Any, hook: AbmHook) -> None:
    list_id = hook.create_account_list("l", hook.create_folder("f")["folderId"])["listId"]
    hook.add_accounts(list_id, [_account(i) for i in range(1200)])
    to_remove = [_account(i) for i in range(1100, 1250)]  # 100 on the list, 50 never added
    result = hook.remove_accounts(list_id, to_remove, batch_size=60)
    assert result.batches == 3 and result.sent == 150
    assert result.applied == 100
    assert result.not_found_count == 50
    assert {a["id"] for a in result.not_found} == {_account(i)["id"] for i in range(1200, 1250)}
    assert _member_ids(abm, list_id) == {_account(i)["id"] for i in range(1100)}


def test_membership_arguments_are_checked_before_any_request(abm: Any, hook: AbmHook) -> None:
    with pytest.raises(ValueError, match="batch_size must be between 1 and 1000"):
        hook.add_accounts("some-list", [_account(1)], batch_size=1001)
    for bad in ("../folders", "a/accounts/remove", "with space", ".."):
        with pytest.raises(ValueError, match="list_id"):
            hook.add_accounts(bad, [_account(1)])
    with pytest.raises(TypeError, match="not a dict"):
        hook.add_accounts("some-list", _account(1))
    assert seen(abm, method="POST") == []
    empty = hook.add_accounts("some-list", [])
    assert (empty.sent, empty.batches) == (0, 0)


def test_unknown_list_is_a_404(hook: AbmHook) -> None:
    with pytest.raises(AbmApiError) as info:
        hook.add_accounts("00000000-0000-0000-0000-000000000000", [_account(1)])
    assert info.value.http_status == 404 and info.value.status == "NOT_FOUND"
    assert info.value.request_id and info.value.request_id in str(info.value)


# --- export jobs and executions --------------------------------------------------------------------


def test_export_job_create_conflict_and_schedule_errors(abm: Any, hook: AbmHook) -> None:
    job = hook.create_export_job(TYPE, "0 6 1 * *")
    assert job["type"] == TYPE
    with pytest.raises(AbmApiError) as conflict:
        hook.create_export_job(TYPE, "0 6 1 * *")
    assert conflict.value.http_status == 409 and conflict.value.status == "ALREADY_EXISTS"

    started = len(seen(abm, method="POST", path=JOBS))
    with pytest.raises(AbmApiError) as too_often:
        hook.create_export_job("DISPLAY_TACTIC_ACCOUNT_PERFORMANCE", "*/5 * * * *")
    err = too_often.value
    assert (err.http_status, err.status) == (400, "FAILED_PRECONDITION")
    assert [v["field"] for v in err.field_violations] == ["schedule"]
    assert str(err).startswith(f"POST {JOBS} failed: 400 FAILED_PRECONDITION: ")
    assert "(schedule: " in str(err) and f"[request id {err.request_id}]" in str(err)
    assert len(seen(abm, method="POST", path=JOBS)) == started + 1, "a 400 is never retried"

    with pytest.raises(AbmApiError) as malformed:
        hook.create_export_job("DISPLAY_TACTIC_ACCOUNT_PERFORMANCE", "every day")
    assert (malformed.value.http_status, malformed.value.status) == (400, "INVALID_ARGUMENT")
    assert "schedule" in str(malformed.value)


def test_iter_executions_follows_tokens_through_empty_pages(abm: Any, hook: AbmHook) -> None:
    hook.create_export_job(TYPE, "0 6 1 * *")
    outcomes = ["FAILED"] * 5 + ["COMPLETE"] + ["FAILED"] * 3 + ["COMPLETE"]
    fired = []
    for outcome in outcomes:
        fired.append(abm.fire(TYPE, outcome=outcome))
        abm.advance(60)
    everything = list(hook.iter_executions(TYPE, page_size=3))
    assert len(everything) == len(outcomes)
    complete = list(hook.iter_executions(TYPE, state="COMPLETE", page_size=2))
    assert len(complete) == 2 and all(e["state"] == "COMPLETE" and e["downloadUri"] for e in complete)
    pages = seen(abm, method="GET", path=f"{JOBS}/{TYPE}/executions")
    assert len(pages) >= 2 + 5, "the filtered scan crosses empty pages and the hook keeps going"

    newest_first = [e["id"] for e in hook.iter_executions(TYPE, order_by="createTime desc")]
    oldest_first = [e["id"] for e in hook.iter_executions(TYPE, order_by="createTime asc", page_size=4)]
    assert newest_first == list(reversed(oldest_first))
    assert oldest_first[0] == fired[0]["id"]
    raw = list(hook.iter_executions(TYPE, filter="state=COMPLETE", order_by=None))
    assert {e["id"] for e in raw} == {e["id"] for e in complete}


def test_executions_errors(abm: Any, hook: AbmHook) -> None:
    with pytest.raises(AbmApiError) as info:
        list(hook.iter_executions(TYPE))
    assert info.value.http_status == 404 and info.value.status == "NOT_FOUND"
    hook.create_export_job(TYPE, "0 6 1 * *")
    with pytest.raises(AbmApiError) as bad_order:
        list(hook.iter_executions(TYPE, order_by="size desc"))
    assert bad_order.value.http_status == 400 and "orderBy" in str(bad_order.value)
    before = len(seen(abm))
    for bad in ("../../accountLists/v2/folders", "A B", "x/y"):
        with pytest.raises(ValueError, match="export_type"):
            list(hook.iter_executions(bad))
    with pytest.raises(ValueError, match="state or filter"):
        list(hook.iter_executions(TYPE, state="COMPLETE", filter="status=FAILED"))
    assert len(seen(abm)) == before


# --- retries ---------------------------------------------------------------------------------------


def test_429_with_retry_after_is_waited_out(abm: Any, hook: AbmHook) -> None:
    hook.create_folder("f")
    before = len(seen(abm, method="GET", path=FOLDERS))
    abm.inject_fault(origin="api", method="GET", path=FOLDERS, kind="status", status=429, retryAfter="2")
    started = time.monotonic()
    assert [f["name"] for f in hook.iter_folders()] == ["f"]
    assert time.monotonic() - started >= 2.0
    assert len(seen(abm, method="GET", path=FOLDERS)) == before + 2


def test_retry_after_longer_than_retry_max_wait_fails_and_says_so(abm: Any) -> None:
    abm.inject_fault(origin="api", method="GET", path=FOLDERS, kind="status", status=429, retryAfter="600")
    with pytest.raises(AbmApiError) as info:
        list(AbmHook(retry_max_wait=5).iter_folders())
    assert info.value.http_status == 429 and "retry_max_wait=5" in str(info.value)
    assert len(seen(abm, method="GET", path=FOLDERS)) == 1


def test_503_after_a_folder_create_is_reconciled_without_a_duplicate(abm: Any, hook: AbmHook) -> None:
    abm.inject_fault(origin="api", method="POST", path=FOLDERS, kind="status", status=503, when="after")
    folder = hook.create_folder("reconciled")
    folders = _named(_find_all(_state(abm), "folders"), "reconciled")
    assert len(folders) == 1
    assert folder["folderId"] in json.dumps(folders[0])
    assert folder["displayName"] == "reconciled"
    assert len(seen(abm, method="POST", path=FOLDERS)) == 1, "found by listing, not re-posted"


def test_timed_out_folder_create_is_found_not_duplicated(abm: Any) -> None:
    # Whether the slow request lands (found by listing) or is dropped with the connection (sent
    # again), exactly one folder must result.
    abm.inject_fault(origin="api", method="POST", path=FOLDERS, kind="delay", delaySeconds=2)
    folder = AbmHook(request_timeout=1.5, retry_max_wait=5).create_folder("slow")
    folders = _named(_find_all(_state(abm), "folders"), "slow")
    assert len(folders) == 1 and folder["folderId"] in json.dumps(folders[0])


def test_503_before_a_folder_create_is_sent_again(abm: Any, hook: AbmHook) -> None:
    abm.inject_fault(origin="api", method="POST", path=FOLDERS, kind="status", status=503, when="before")
    folder = hook.create_folder("second try")
    assert len(_named(_find_all(_state(abm), "folders"), "second try")) == 1
    assert folder["folderId"]
    assert len(seen(abm, method="POST", path=FOLDERS)) == 2


def test_503_after_a_list_create_is_reconciled_without_a_duplicate(abm: Any, hook: AbmHook) -> None:
    folder_id = hook.create_folder("f")["folderId"]
    hook.create_account_list("same name", folder_id)  # an older list of that name must not be returned
    abm.inject_fault(origin="api", method="POST", path=LISTS, kind="status", status=503, when="after")
    created = hook.create_account_list("same name", folder_id)
    lists = [i for i in hook.iter_account_lists([folder_id]) if i["displayName"] == "same name"]
    assert len(lists) == 2
    newest = max(lists, key=lambda i: (i.get("createTime") or "", i["id"] == created["listId"]))
    assert created == {"listId": newest["id"], "listName": "same name", "folderId": folder_id}


def test_503_after_an_export_job_create_surfaces_as_409(abm: Any, hook: AbmHook) -> None:
    abm.inject_fault(origin="api", method="POST", path=JOBS, kind="status", status=503, when="after")
    with pytest.raises(AbmApiError) as info:
        hook.create_export_job(TYPE, "0 6 1 * *")
    assert info.value.http_status == 409 and info.value.status == "ALREADY_EXISTS"
    assert "earlier attempt failed with 503" in str(info.value)
    assert [j["type"] for j in _find_all(_state(abm), "jobs")] == [TYPE]
    assert len(list(hook.iter_executions(TYPE))) == 0, "the job exists (listing it is not a 404)"


def test_429_on_a_create_is_retried_as_it_never_happened(abm: Any, hook: AbmHook) -> None:
    abm.inject_fault(origin="api", method="POST", path=JOBS, kind="status", status=429, retryAfter="1")
    assert hook.create_export_job(TYPE, "0 6 1 * *")["type"] == TYPE
    assert len(seen(abm, method="POST", path=JOBS)) == 2


def test_persistent_5xx_gives_up_after_max_attempts(abm: Any) -> None:
    abm.inject_fault(origin="api", method="GET", path=FOLDERS, kind="status", status=500, count=10)
    with pytest.raises(AbmApiError) as info:
        list(AbmHook(max_attempts=3, retry_max_wait=2).iter_folders())
    assert info.value.http_status == 500 and info.value.attempts == 3
    assert "after 3 attempts" in str(info.value)
    assert len(seen(abm, method="GET", path=FOLDERS)) == 3


def test_401_is_never_retried(abm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "abm", "host": abm.base_url, "password": "not-a-key-0000"}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_WRONG", json.dumps(conn))
    with pytest.raises(AbmApiError) as info:
        list(AbmHook("abm_wrong").iter_folders())
    assert info.value.http_status == 401 and info.value.status == "UNAUTHENTICATED"
    assert "abm_wrong" in str(info.value)
    assert len(seen(abm, method="GET", path=FOLDERS)) == 1


@pytest.mark.parametrize("kind", ["reset", "malformed_json"])
def test_broken_answers_to_reads_are_retried(abm: Any, hook: AbmHook, kind: str) -> None:
    hook.create_folder("f")
    before = len(seen(abm, method="GET", path=FOLDERS))
    abm.inject_fault(origin="api", method="GET", path=FOLDERS, kind=kind)
    assert [f["name"] for f in hook.iter_folders()] == ["f"]
    assert len(seen(abm, method="GET", path=FOLDERS)) == before + 2


def test_malformed_answer_to_a_create_is_reconciled(abm: Any, hook: AbmHook) -> None:
    abm.inject_fault(origin="api", method="POST", path=FOLDERS, kind="malformed_json")
    folder = hook.create_folder("garbled")
    assert len(_named(_find_all(_state(abm), "folders"), "garbled")) == 1
    assert folder["displayName"] == "garbled" and folder["folderId"]


def test_read_timeout_is_retried(abm: Any) -> None:
    abm.inject_fault(origin="api", method="GET", path=FOLDERS, kind="delay", delaySeconds=3)
    assert list(AbmHook(request_timeout=1, retry_max_wait=2).iter_folders()) == []
    assert len(seen(abm, method="GET", path=FOLDERS)) == 2


# --- downloads ---------------------------------------------------------------------------------------


def _complete_execution(abm: Any, hook: AbmHook, size: int = 300_000) -> dict[str, Any]:
    hook.create_export_job(TYPE, "0 6 1 * *")
    abm.fire(TYPE, outcome="COMPLETE", sizeBytes=size)
    return next(hook.iter_executions(TYPE, state="COMPLETE"))


def test_download_streams_in_chunks_and_checks_length(abm: Any, hook: AbmHook) -> None:
    execution = _complete_execution(abm, hook)
    buffer = io.BytesIO()
    progress: list[tuple[int, int | None]] = []
    result = hook.download(
        execution["downloadUri"],
        buffer,
        chunk_size=64 * 1024,
        on_progress=lambda n, t: progress.append((n, t)),
    )
    data = buffer.getvalue()
    assert result.bytes == len(data) == result.content_length
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.resumed == 0 and result.etag
    assert data.startswith(b"date,campaign_id,campaign_name,tactic_id")
    assert len(progress) >= len(data) // (64 * 1024)
    assert progress[-1] == (len(data), len(data))


def test_download_resumes_after_a_dropped_connection(abm: Any, hook: AbmHook) -> None:
    execution = _complete_execution(abm, hook)
    clean = io.BytesIO()
    hook.download(execution["downloadUri"], clean)
    path = execution["downloadUri"].split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]
    abm.inject_fault(
        origin="storage", method="GET", path=f"/{path}", kind="disconnect_mid_body", afterBytes=100_000
    )
    resumed = io.BytesIO()
    result = hook.download(execution["downloadUri"], resumed, chunk_size=16 * 1024)
    assert resumed.getvalue() == clean.getvalue()
    assert result.resumed == 1 and result.bytes == len(clean.getvalue())
    storage = seen(abm, method="GET", origin="storage")
    ranged = [e for e in storage if "range" in {k.lower() for k in (e.get("headers") or {})}]
    assert len(ranged) == 1
    headers = {k.lower(): v for k, v in ranged[0]["headers"].items()}
    assert headers["range"].startswith("bytes=") and headers["range"] != "bytes=0-"
    assert headers.get("if-match") == result.etag


def test_expired_download_link_is_a_403(abm: Any, hook: AbmHook) -> None:
    execution = _complete_execution(abm, hook)
    abm.advance(7 * 24 * 3600)
    with pytest.raises(AbmApiError) as info:
        hook.download(execution["downloadUri"], io.BytesIO())
    assert info.value.http_status == 403
    assert "expired" in str(info.value)
    assert "Signature" not in str(info.value) and "?" not in info.value.path


def test_storage_5xx_is_retried(abm: Any, hook: AbmHook) -> None:
    execution = _complete_execution(abm, hook, size=50_000)
    abm.inject_fault(origin="storage", method="GET", path="/.*", kind="status", status=503)
    buffer = io.BytesIO()
    result = hook.download(execution["downloadUri"], buffer)
    assert result.bytes == len(buffer.getvalue()) == result.content_length


def test_plain_http_download_to_a_remote_host_is_refused(hook: AbmHook) -> None:
    with pytest.raises(AbmApiError, match="plain http://") as info:
        hook.download("http://bucket.example.com/x.csv?sig=1", io.BytesIO())
    assert info.value.kind == "unsafe_url" and not info.value.transient
