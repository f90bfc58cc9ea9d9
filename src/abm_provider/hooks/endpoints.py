"""The API's endpoints as :class:`~._pipeline.Call` s, the checks to run before any request, and
listing items in the shape the create calls return. Shared by both hooks; no I/O here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any, Literal

from abm_provider.common.arguments import check_text, check_whole
from abm_provider.common.urls import path_segment
from abm_provider.hooks._pipeline import Call, Reconcile, api_path

__all__ = ["MAX_ACCOUNTS_PER_REQUEST", "check_batch_size"]

FOLDERS_PATH = api_path("accountLists", "v2", "folders")
LISTS_PATH = api_path("accountLists", "v2", "accountLists")
EXPORT_JOBS_PATH = api_path("exports", "v1", "exportJobs")

#: The API refuses more than this many accounts in one add or remove request.
MAX_ACCOUNTS_PER_REQUEST = 1000
#: What a create-or-reuse of a folder or list does when one of that name exists: reuse it (the
#: oldest), create another, or fail as the service would.
IfExists = Literal["reuse", "create", "fail"]
IF_EXISTS: tuple[IfExists, ...] = ("reuse", "create", "fail")
#: What scheduling an export job does when the type has one: keep it, or fail as the service would.
JobIfExists = Literal["ignore", "fail"]
JOB_IF_EXISTS: tuple[JobIfExists, ...] = ("ignore", "fail")


def check_batch_size(batch_size: object) -> int:
    """Return ``batch_size`` if it is a whole number the API accepts (1 to 1000), else raise."""
    return check_whole(batch_size, "batch_size", 1, MAX_ACCOUNTS_PER_REQUEST)


def folders_call(page_size: int = 100) -> Call:
    """``GET /accountLists/v2/folders``: every folder, page by page."""
    check_whole(page_size, "page_size", 1)  # the service caps it at 100
    return Call("GET", FOLDERS_PATH, {"pageSize": page_size})


def lists_call(folder_ids: Sequence[str] | None = None, page_size: int = 100) -> Call:
    """``GET /accountLists/v2/accountLists``: every list, or those of ``folder_ids``."""
    if isinstance(folder_ids, (str, bytes)):
        raise ValueError("folder_ids must be a list of folder ids, not a single string")
    ids = [check_text(f, "folder_ids[]") for f in folder_ids] if folder_ids else None
    check_whole(page_size, "page_size", 1)  # the service caps it at 100
    return Call("GET", LISTS_PATH, {"folderIds": ids, "pageSize": page_size})


def executions_call(
    export_type: str,
    *,
    state: str | None = None,
    order_by: str | None = "updateTime desc",
    page_size: int = 100,
    filter: str | None = None,
) -> Call:
    """``GET .../exportJobs/{type}/executions``, validated, for both hooks."""
    segment = path_segment(export_type, "export_type")
    if state is not None and filter is not None:
        raise ValueError("give state or filter, not both")
    if state is not None:
        if not isinstance(state, str) or not state.strip() or any(c.isspace() for c in state.strip()):
            raise ValueError(f"state must be one execution state such as 'COMPLETE', got {state!r}")
        filter = f"status={state.strip()}"
    check_whole(page_size, "page_size", 1)  # the service caps it at 100
    params = {"pageSize": page_size, "orderBy": order_by or None, "filter": filter or None}
    return Call("GET", f"{EXPORT_JOBS_PATH}/{segment}/executions", params)


def create_folder_call(folder_name: str, folder_access: str, known: Set[str]) -> Call:
    """``POST .../folders``; after an unknown outcome it looks for a folder of that name whose id is not
    one of the ``known`` ones (those listed before it was sent), since names are not unique."""

    def made(item: Mapping[str, Any]) -> bool:
        return item.get("name") == folder_name and folder_resource(item)["folderId"] not in known

    body = {"folderName": folder_name, "folderAccess": folder_access}
    return Call("POST", FOLDERS_PATH, body=body, on_unknown=Reconcile(folders_call(), "folders", made))


def is_list(item: Mapping[str, Any], list_name: str, folder_id: str) -> bool:
    """Whether a listed list is ``list_name`` in ``folder_id`` (a list is known by name within a folder)."""
    shaped = list_resource(item, folder_id)
    return bool(shaped["listName"] == list_name and shaped["folderId"] == folder_id)


def create_list_call(list_name: str, folder_id: str, known: Set[str]) -> Call:
    """``POST .../accountLists``; after an unknown outcome it looks, as :func:`create_folder_call` does,
    among the lists of ``folder_id``."""

    def made(item: Mapping[str, Any]) -> bool:
        return is_list(item, list_name, folder_id) and list_resource(item)["listId"] not in known

    body = {"listName": list_name, "folderId": folder_id}
    look = Reconcile(lists_call([folder_id]), "lists", made)
    return Call("POST", LISTS_PATH, body=body, on_unknown=look)


def create_job_call(export_type: str, schedule: str) -> Call:
    """``POST .../exportJobs``: sent again after an unknown outcome, since the service allows one job
    per type and answers a second create with 409; a 409 after an unknown outcome says so."""
    path_segment(export_type, "export_type")
    check_text(schedule, "schedule")
    body = {"type": export_type, "schedule": schedule}
    return Call("POST", EXPORT_JOBS_PATH, body=body, on_unknown="resend")


def folder_resource(item: Mapping[str, Any]) -> dict[str, Any]:
    """A folder in the create answer's shape, from the create or the listing shape.

    The two endpoints name the same fields differently (``folderId``/``displayName`` against
    ``uuid``/``name``); callers should not care which one produced the value.
    """
    return {
        "folderId": item.get("folderId") or item.get("uuid") or item.get("id"),
        "displayName": item.get("displayName") if "displayName" in item else item.get("name"),
        "folderAccess": item.get("folderAccess"),
    }


def list_resource(item: Mapping[str, Any], folder_id: str | None = None) -> dict[str, Any]:
    """A list in the create answer's shape (``listId``, ``listName``, ``folderId``), from either shape."""
    name = item.get("listName")
    if name is None:
        name = item.get("displayName") if "displayName" in item else item.get("name")
    return {
        "listId": item.get("listId") or item.get("id"),
        "listName": name,
        "folderId": item.get("folderId") or folder_id,
    }


def account_payloads(batch: list[Any], action: str, offset: int) -> list[dict[str, Any]]:
    """The request's accounts: checked to be mappings with an id; copied only where one is changed."""
    payload: list[dict[str, Any]] = []
    for position, account in enumerate(batch, start=offset):
        if type(account) is not dict and not isinstance(account, Mapping):
            raise TypeError(f"accounts[{position}] must be a mapping with 'id', got {type(account).__name__}")
        if not account.get("id"):
            raise ValueError(f"accounts[{position}] has no 'id'")
        if action == "remove" and "name" in account:
            # The remove request takes id, crmOrgId and crmType only; the caller's dict stays as it was.
            account = {k: v for k, v in account.items() if k != "name"}
        payload.append(account if type(account) is dict else dict(account))
    return payload
