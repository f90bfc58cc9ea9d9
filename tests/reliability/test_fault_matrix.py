"""The fault matrix: every operation against every fault the emulator can inject, with the outcome.

Each cell injects one fault (it fires once) on the request the operation exists for, runs the operation
through its operator (the hook for listing executions), and checks three things against ``EXPECTED``:
whether it succeeded or failed (and with which exception and status), how many requests reached the
faulted endpoint (so "retried", "reconciled without re-sending" and "not retried" are observed, not
assumed), and the emulator's state afterwards (exactly one folder, list or job; the right membership;
the right bytes in the file; nothing half-written). The "What happens when..." table of
docs/reliability.md is rendered from the same table, and a test fails when the two differ; regenerate it with
``.venv/bin/python tests/reliability/test_fault_matrix.py``.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import requests

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
#: The page's generated table stands between these two lines.
BEGIN, END = "<!-- fault-matrix:begin -->", "<!-- fault-matrix:end -->"
EXPORT_TYPE = "TACTIC_PERFORMANCE"
CRM_ORG = "00D000000000001"
ACCOUNTS = [{"id": f"001{i:012d}", "name": f"Account {i}", "crmOrgId": CRM_ORG} for i in range(1, 26)]
REMOVED = ACCOUNTS[:10]
#: Retry settings for every cell: short waits so the matrix is quick, enough attempts for one fault.
RETRY = {"max_attempts": 3, "retry_max_wait": 0.3, "request_timeout": 5.0}
#: The delay cells shorten the request timeout below the injected delay.
DELAY_TIMEOUT = 1.0
DELAY_SECONDS = 1.6
RETRY_AFTER_SECONDS = 1


# --- the faults --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One injected fault: admin fields (``origin``/``method``/``path`` come from the operation)."""

    key: str
    label: str
    spec: dict[str, Any]


FAULTS = [
    Fault(
        "429_retry_after",
        f"429 with `Retry-After: {RETRY_AFTER_SECONDS}`",
        {"kind": "status", "status": 429, "retryAfter": str(RETRY_AFTER_SECONDS)},
    ),
    Fault("429", "429 without `Retry-After`", {"kind": "status", "status": 429}),
    Fault(
        "500_after", "500 after the request took effect", {"kind": "status", "status": 500, "when": "after"}
    ),
    Fault("503", "503 before the request took effect", {"kind": "status", "status": 503}),
    Fault("423", "423 Locked", {"kind": "status", "status": 423}),
    Fault("reset", "connection reset before any answer", {"kind": "reset"}),
    Fault("disconnect", "connection dropped mid-body", {"kind": "disconnect_mid_body", "afterBytes": 6}),
    Fault(
        "delay",
        f"answer slower than the request timeout ({DELAY_SECONDS} s > {DELAY_TIMEOUT} s)",
        {"kind": "delay", "delaySeconds": DELAY_SECONDS},
    ),
    Fault("malformed_json", "malformed JSON body (200)", {"kind": "malformed_json"}),
    Fault("401", "401 Unauthenticated", {"kind": "status", "status": 401}),
]
FAULT_BY_KEY = {f.key: f for f in FAULTS}


# --- the operations ----------------------------------------------------------------------------------


@dataclass
class Operation:
    """One operation: where its request goes, how to set it up and run it, and what its state must be.

    ``prepare`` builds what the operation needs (before the fault is armed) and returns it;
    ``run`` performs the operation with the given retry settings; ``succeeded`` checks the emulator
    (and the result) after a success; ``failed_cleanly`` checks nothing was created, changed or left
    half-written after a failure.
    """

    key: str
    label: str
    origin: str
    method: str
    path: str
    prepare: Callable[[Any, Path], dict[str, Any]]
    run: Callable[[Any, dict[str, Any], dict[str, Any], dict[str, Any]], Any]
    succeeded: Callable[[Any, dict[str, Any], Any], None]
    failed_cleanly: Callable[[Any, dict[str, Any]], None]
    tool: str = ""


def _account_state(abm: Any) -> dict[str, Any]:
    accounts: dict[str, Any] = abm.state()["accounts"]
    return next(a for a in accounts.values() if abm.api_key in a["apiKeys"])


def _hook(retry: dict[str, Any] | None = None) -> Any:
    from abm_provider.hooks.abm import AbmHook

    retry = retry or RETRY
    return AbmHook(
        max_attempts=retry["max_attempts"],
        retry_max_wait=retry["retry_max_wait"],
        request_timeout=retry["request_timeout"],
    )


def _member_ids(abm: Any, list_id: str) -> list[str]:
    return sorted(m["id"] for m in abm.members(list_id))


# create folder


def _prepare_nothing(abm: Any, tmp: Path) -> dict[str, Any]:
    return {}


def _run_create_folder(abm: Any, prep: dict[str, Any], retry: dict[str, Any], ctx: dict[str, Any]) -> Any:
    from abm_provider.operators.account_lists import CreateAccountListFolderOperator

    return CreateAccountListFolderOperator(
        task_id="create_folder", folder_name="Reliability", **retry
    ).execute(ctx)


def _folder_created_once(abm: Any, prep: dict[str, Any], result: Any) -> None:
    folders = [f for f in _account_state(abm)["folders"] if f["name"] == "Reliability"]
    assert len(folders) == 1, folders
    assert result["folderId"] == folders[0]["folderId"]
    assert result["displayName"] == "Reliability"


def _no_folder(abm: Any, prep: dict[str, Any]) -> None:
    assert _account_state(abm)["folders"] == []


# create list


def _prepare_folder(abm: Any, tmp: Path) -> dict[str, Any]:
    hook = _hook()
    folder = hook.create_folder("Reliability")
    hook.close()
    return {"folder_id": folder["folderId"]}


def _run_create_list(abm: Any, prep: dict[str, Any], retry: dict[str, Any], ctx: dict[str, Any]) -> Any:
    from abm_provider.operators.account_lists import CreateAccountListOperator

    return CreateAccountListOperator(
        task_id="create_list", list_name="Targets", folder_id=prep["folder_id"], **retry
    ).execute(ctx)


def _list_created_once(abm: Any, prep: dict[str, Any], result: Any) -> None:
    lists = [item for item in _account_state(abm)["lists"] if item["name"] == "Targets"]
    assert len(lists) == 1, lists
    assert lists[0]["folderId"] == prep["folder_id"]
    assert result["listId"] == lists[0]["listId"] and result["folderId"] == prep["folder_id"]


def _no_list(abm: Any, prep: dict[str, Any]) -> None:
    assert _account_state(abm)["lists"] == []


# add and remove accounts


def _prepare_list(abm: Any, tmp: Path, members: list[dict[str, str]] | None = None) -> dict[str, Any]:
    hook = _hook()
    folder = hook.create_folder("Reliability")
    made = hook.create_account_list("Targets", folder["folderId"])
    if members:
        hook.add_accounts(made["listId"], [{**m, "crmType": "SALESFORCE"} for m in members])
    hook.close()
    return {"list_id": made["listId"], "rejects": tmp / "rejects.csv"}


def _membership_run(operator: str, task_id: str, accounts: list[dict[str, Any]]) -> Callable[..., Any]:
    """An ``Operation.run`` of the add or remove operator ``operator`` with ``accounts``."""

    def run(abm: Any, prep: dict[str, Any], retry: dict[str, Any], ctx: dict[str, Any]) -> Any:
        from abm_provider.operators import account_lists

        return getattr(account_lists, operator)(
            task_id=task_id,
            list_id=prep["list_id"],
            accounts=accounts,
            rejects_path=str(prep["rejects"]),
            **retry,
        ).execute(ctx)

    return run


_run_add = _membership_run("AddAccountsToListOperator", "add_accounts", ACCOUNTS)


def _all_added(abm: Any, prep: dict[str, Any], result: Any) -> None:
    assert _member_ids(abm, prep["list_id"]) == sorted(a["id"] for a in ACCOUNTS)
    # A retried request whose first attempt landed reports its accounts as duplicates, not as lost.
    assert result["sent"] == len(ACCOUNTS) and result["added"] + result["duplicates"] == len(ACCOUNTS)
    assert result["not_found"] == 0 and result["rejected"] == 0 and result["rejects_path"] is None


def _none_added(abm: Any, prep: dict[str, Any]) -> None:
    assert _member_ids(abm, prep["list_id"]) == []


def _prepare_members(abm: Any, tmp: Path) -> dict[str, Any]:
    return _prepare_list(abm, tmp, ACCOUNTS)


_run_remove = _membership_run("RemoveAccountsFromListOperator", "remove_accounts", REMOVED)


def _removed(abm: Any, prep: dict[str, Any], result: Any) -> None:
    assert _member_ids(abm, prep["list_id"]) == sorted(a["id"] for a in ACCOUNTS[len(REMOVED) :])
    assert result["sent"] == len(REMOVED) and result["rejected"] == 0


def _none_removed(abm: Any, prep: dict[str, Any]) -> None:
    assert _member_ids(abm, prep["list_id"]) == sorted(a["id"] for a in ACCOUNTS)


# export jobs


def _run_create_job(abm: Any, prep: dict[str, Any], retry: dict[str, Any], ctx: dict[str, Any]) -> Any:
    from abm_provider.operators.exports import CreateExportJobOperator

    return CreateExportJobOperator(
        task_id="create_job", export_type=EXPORT_TYPE, schedule="0 5 * * *", **retry
    ).execute(ctx)


def _job_created_once(abm: Any, prep: dict[str, Any], result: Any) -> None:
    jobs = _account_state(abm)["jobs"]
    assert [(j["type"], j["schedule"]) for j in jobs] == [(EXPORT_TYPE, "0 5 * * *")]
    assert result["type"] == EXPORT_TYPE


def _no_job(abm: Any, prep: dict[str, Any]) -> None:
    assert _account_state(abm)["jobs"] == []


def _prepare_executions(abm: Any, tmp: Path) -> dict[str, Any]:
    hook = _hook()
    hook.create_export_job(EXPORT_TYPE, "0 5 * * *")
    hook.close()
    fired = [abm.fire(EXPORT_TYPE, size_bytes=2_000)["id"] for _ in range(3)]
    return {"ids": sorted(fired)}


def _run_list_executions(abm: Any, prep: dict[str, Any], retry: dict[str, Any], ctx: dict[str, Any]) -> Any:
    hook = _hook(retry)
    try:
        return list(hook.iter_executions(EXPORT_TYPE))
    finally:
        hook.close()


def _executions_listed(abm: Any, prep: dict[str, Any], result: Any) -> None:
    assert sorted(e["id"] for e in result) == prep["ids"]


def _nothing_to_check(abm: Any, prep: dict[str, Any]) -> None:
    assert len(_account_state(abm)["executions"]) == len(prep["ids"])


# download


def _prepare_download(abm: Any, tmp: Path) -> dict[str, Any]:
    hook = _hook()
    hook.create_export_job(EXPORT_TYPE, "0 5 * * *")
    abm.fire(EXPORT_TYPE, size_bytes=60_000)
    execution = next(hook.iter_executions(EXPORT_TYPE, state="COMPLETE"))
    hook.close()
    reference = requests.get(execution["downloadUri"], timeout=30)
    reference.raise_for_status()
    out = tmp / "download"
    out.mkdir()
    return {"execution": execution, "expected": reference.content, "dir": out, "target": out / "export.csv"}


def _run_download(abm: Any, prep: dict[str, Any], retry: dict[str, Any], ctx: dict[str, Any]) -> Any:
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    return DownloadExecutionCsvOperator(
        task_id="download", execution=prep["execution"], destination=str(prep["target"]), **retry
    ).execute(ctx)


def _downloaded(abm: Any, prep: dict[str, Any], result: Any) -> None:
    expected: bytes = prep["expected"]
    assert prep["target"].read_bytes() == expected
    assert result["bytes"] == len(expected)
    assert result["sha256"] == hashlib.sha256(expected).hexdigest()
    assert sorted(p.name for p in prep["dir"].iterdir()) == ["export.csv", "export.csv.manifest.json"]


def _no_file(abm: Any, prep: dict[str, Any]) -> None:
    assert list(prep["dir"].iterdir()) == [], "no partial or temporary file is left behind"


OPERATIONS = [
    Operation(
        "create_folder",
        "create folder",
        "api",
        "POST",
        "/accountLists/v2/folders",
        _prepare_nothing,
        _run_create_folder,
        _folder_created_once,
        _no_folder,
        tool="CreateAccountListFolderOperator",
    ),
    Operation(
        "create_list",
        "create list",
        "api",
        "POST",
        "/accountLists/v2/accountLists",
        _prepare_folder,
        _run_create_list,
        _list_created_once,
        _no_list,
        tool="CreateAccountListOperator",
    ),
    Operation(
        "add_accounts",
        "add accounts",
        "api",
        "POST",
        "/accountLists/v2/accountLists/[^/]+/accounts/add",
        _prepare_list,
        _run_add,
        _all_added,
        _none_added,
        tool="AddAccountsToListOperator",
    ),
    Operation(
        "remove_accounts",
        "remove accounts",
        "api",
        "POST",
        "/accountLists/v2/accountLists/[^/]+/accounts/remove",
        _prepare_members,
        _run_remove,
        _removed,
        _none_removed,
        tool="RemoveAccountsFromListOperator",
    ),
    Operation(
        "create_export_job",
        "create export job",
        "api",
        "POST",
        "/exports/v1/exportJobs",
        _prepare_nothing,
        _run_create_job,
        _job_created_once,
        _no_job,
        tool="CreateExportJobOperator",
    ),
    Operation(
        "list_executions",
        "list executions",
        "api",
        "GET",
        f"/exports/v1/exportJobs/{EXPORT_TYPE}/executions",
        _prepare_executions,
        _run_list_executions,
        _executions_listed,
        _nothing_to_check,
        tool="AbmHook.iter_executions",
    ),
    Operation(
        "download",
        "download",
        "storage",
        "GET",
        "/.*",
        _prepare_download,
        _run_download,
        _downloaded,
        _no_file,
        tool="DownloadExecutionCsvOperator",
    ),
]
OPERATION_BY_KEY = {o.key: o for o in OPERATIONS}


# --- the expected outcomes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """A cell: success or failure, requests to the faulted endpoint, and how the outcome came about.

    ``how`` is one of the keys of ``HOW``, which explains it in the document.
    """

    outcome: Literal["ok", "fail"]
    sends: int
    how: str
    error: str | None = None
    status: int | None = None


HOW = {
    "retried": "the request was refused or failed without effect and was sent again",
    "waited": f"the request was sent again after at least the `Retry-After` ({RETRY_AFTER_SECONDS} s)",
    "found": "the create's outcome was unknown; a listing found the resource the failed attempt made, "
    "so it was not sent again",
    "checked": "the create's outcome was unknown; a listing found nothing, so it was sent again",
    "reposted": "the create's outcome was unknown; it was sent again and the service refuses a duplicate "
    "(409), which the operator treats as the job existing",
    "resumed": "the download continued from the byte where it broke (`Range` + `If-Match`)",
    "refused": "not retried: the key was refused; an operator fails the task for good "
    "(`AirflowFailException`, no task retries), the hook raises `AbmApiError`, each with the status "
    "and a hint naming the connection",
    "link refused": "not retried: the storage refused the pre-signed link; the task fails with the "
    "status, and no file (not even a temporary one) is left",
    "not the file": "not retried: the storage answered 200 with half the file labelled "
    "`Content-Type: application/json`; the download fails for good (`UnexpectedBody`, an `AbmApiError` "
    "that is also an `AirflowFailException`), showing how the body begins, and no file is left",
}

_OK = Expected("ok", 2, "retried")
_WAITED = Expected("ok", 2, "waited")


def _row(**cells: Expected) -> dict[str, Expected]:
    return cells


#: The create may have taken effect before its answer was lost: the folder or list is found by name,
#: the export job posted again (its 409 is ours).
_ANSWER_LOST = _row(
    create_folder=Expected("ok", 1, "found"),
    create_list=Expected("ok", 1, "found"),
    add_accounts=_OK,
    remove_accounts=_OK,
    create_export_job=Expected("ok", 2, "reposted"),
    list_executions=_OK,
    download=_OK,
)
#: The create did not happen: the folder or list is looked for, not found, and created again.
_NOT_DONE = {
    **_ANSWER_LOST,
    "create_folder": Expected("ok", 2, "checked"),
    "create_list": Expected("ok", 2, "checked"),
    "create_export_job": _OK,
}
_REFUSED = Expected("fail", 1, "refused", "AirflowFailException", 401)

#: ``EXPECTED[fault][operation]``.
EXPECTED: dict[str, dict[str, Expected]] = {
    "429_retry_after": {o.key: _WAITED for o in OPERATIONS},
    "429": {o.key: _OK for o in OPERATIONS},
    "500_after": _ANSWER_LOST,
    "503": _NOT_DONE,
    "423": {o.key: _OK for o in OPERATIONS},
    "reset": _NOT_DONE,
    "disconnect": {**_ANSWER_LOST, "download": Expected("ok", 2, "resumed")},
    "delay": _ANSWER_LOST,
    "malformed_json": {
        **_ANSWER_LOST,
        "download": Expected("fail", 1, "not the file", "UnexpectedBody", 200),
    },
    "401": _row(
        create_folder=_REFUSED,
        create_list=_REFUSED,
        add_accounts=_REFUSED,
        remove_accounts=_REFUSED,
        create_export_job=_REFUSED,
        list_executions=Expected("fail", 1, "refused", "AbmApiError", 401),
        download=Expected("fail", 1, "link refused", "AbmApiError", 401),
    ),
}


# --- the document ------------------------------------------------------------------------------------


def _cell_text(expected: Expected) -> str:
    if expected.outcome == "ok":
        return f"✅ {expected.how} ({expected.sends}×)"
    return f"❌ `{expected.error}` {expected.status} ({expected.sends}×)"


def render_markdown() -> str:
    """The page's "What happens when..." table, rendered from ``EXPECTED``."""
    lines = [
        BEGIN,
        "<!-- Generated from tests/reliability/test_fault_matrix.py; do not edit by hand.",
        "     Regenerate: .venv/bin/python tests/reliability/test_fault_matrix.py -->",
        "Each cell is a test (`tests/reliability/test_fault_matrix.py`): the fault is injected once into "
        "the emulator on the operation's request, the operation runs with `max_attempts=3`, and the test "
        "checks the outcome, how many requests reached the endpoint (in brackets) and the service's "
        "state afterwards: exactly one folder, list or job, the right list membership, the right bytes "
        "in the downloaded file, and after a failure nothing created, changed or half-written.",
        "",
        "| when... | " + " | ".join(o.label for o in OPERATIONS) + " |",
        "|---|" + "---|" * len(OPERATIONS),
    ]
    for fault in FAULTS:
        cells = [_cell_text(EXPECTED[fault.key][o.key]) for o in OPERATIONS]
        lines.append(f"| {fault.label} | " + " | ".join(cells) + " |")
    lines += ["", "Run through: " + ", ".join(f"{o.label}: `{o.tool}`" for o in OPERATIONS) + ".", ""]
    used = {e.how for row in EXPECTED.values() for e in row.values()}
    lines += [f"- **{how}**: {text}." for how, text in HOW.items() if how in used]
    lines += [
        "",
        "The download's faults hit the storage origin that serves `downloadUri`; the others hit the API. "
        "A fault that keeps coming back (more than `max_attempts`) fails the task with `AbmApiError` "
        "naming the status and the number of attempts; Airflow's task `retries` then apply.",
        END,
    ]
    return "\n".join(lines)


def page_block(text: str) -> str:
    """The generated part of the page, markers included."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def test_the_documented_table_matches_the_tested_table() -> None:
    assert page_block(PAGE.read_text(encoding="utf-8")) == render_markdown(), (
        "docs/reliability.md's fault table is out of date: "
        "run .venv/bin/python tests/reliability/test_fault_matrix.py"
    )


def test_every_cell_has_an_expectation() -> None:
    assert set(EXPECTED) == set(FAULT_BY_KEY)
    for row in EXPECTED.values():
        assert set(row) == set(OPERATION_BY_KEY)
        for cell in row.values():
            assert cell.how in HOW
            assert (cell.outcome == "fail") == (cell.error is not None)


# --- the matrix --------------------------------------------------------------------------------------


def _requests_to(abm: Any, operation: Operation) -> list[dict[str, Any]]:
    pattern = re.compile(operation.path)
    return [
        entry
        for entry in abm.requests_seen()
        if entry["origin"] == operation.origin
        and entry["method"] == operation.method
        and pattern.fullmatch(entry["path"])
    ]


def _retry_for(fault: Fault) -> dict[str, Any]:
    """``RETRY``, with room for the waits two faults need.

    A ``Retry-After`` longer than ``retry_max_wait`` ends the call (by design), so that cell allows it.
    A create that timed out waits ``min(request_timeout, retry_max_wait)`` for the slow request to land
    before it looks for it, so the delay cell's ``retry_max_wait`` is not below its shortened timeout.
    """
    retry = dict(RETRY)
    if "retryAfter" in fault.spec:
        retry["retry_max_wait"] = float(fault.spec["retryAfter"])
    if fault.spec["kind"] == "delay":
        retry["request_timeout"] = DELAY_TIMEOUT
        retry["retry_max_wait"] = DELAY_TIMEOUT
    return retry


@pytest.mark.parametrize("operation_key", list(OPERATION_BY_KEY))
@pytest.mark.parametrize("fault_key", list(FAULT_BY_KEY))
def test_fault_matrix(
    abm: Any, context: dict[str, Any], tmp_path: Path, fault_key: str, operation_key: str
) -> None:
    fault = FAULT_BY_KEY[fault_key]
    operation = OPERATION_BY_KEY[operation_key]
    expected = EXPECTED[fault_key][operation_key]
    prep = operation.prepare(abm, tmp_path)
    abm.admin("DELETE", "/_admin/requests")
    retry = _retry_for(fault)
    abm.inject_fault(origin=operation.origin, method=operation.method, path=operation.path, **fault.spec)

    if expected.outcome == "ok":
        result = operation.run(abm, prep, retry, context)
        operation.succeeded(abm, prep, result)
    else:
        with pytest.raises(Exception) as info:
            operation.run(abm, prep, retry, context)
        err = info.value
        assert type(err).__name__ == expected.error, repr(err)
        assert str(expected.status) in str(err)
        if expected.how == "refused":
            assert "check the API key (password) of connection 'abm_default'" in str(err)
        operation.failed_cleanly(abm, prep)

    assert abm.admin("GET", "/_admin/faults")["faults"] == [], "the fault was hit"
    sent = _requests_to(abm, operation)
    assert len(sent) == expected.sends, [(e["path"], e["status"]) for e in sent]
    if expected.how == "waited":
        assert sent[1]["time"] - sent[0]["time"] >= RETRY_AFTER_SECONDS
    if expected.how == "resumed":
        assert "range" in sent[1]["headers"] and "if-match" in sent[1]["headers"]


def test_a_delayed_create_still_happens_after_the_client_gave_up(abm: Any) -> None:
    """The delay fault models a slow server: the request it holds takes effect after the client left.

    Before the fault read the body up front, the client's disconnect made the delayed request fail
    with 400, so the "answer slower than the timeout" cells never exercised the reconciliation.
    """
    abm.inject_fault(
        origin="api", method="POST", path="/accountLists/v2/folders", kind="delay", delaySeconds=1
    )
    with pytest.raises(requests.exceptions.Timeout):
        requests.post(
            abm.base_url + "/accountLists/v2/folders",
            json={"folderName": "slow", "folderAccess": "PUBLIC"},
            headers={"Authorization": f"Bearer {abm.api_key}"},
            timeout=0.3,
        )
    from support.emulator_log import seen  # here, not above: this module also runs as a script

    # Done once the emulator answered the held request (its log entry gets a status then): the
    # folder is made a moment before the answer, so waiting on the folder alone could read no status.
    deadline = time.monotonic() + 10
    while not seen(abm, method="POST", answered=True) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [e["status"] for e in seen(abm, method="POST", answered=True)] == [200]
    assert [f["name"] for f in _account_state(abm)["folders"]] == ["slow"]


if __name__ == "__main__":
    text = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(text.replace(page_block(text), render_markdown()), encoding="utf-8")
    sys.stdout.write(f"wrote the fault table into {PAGE}\n")
