"""Building requests and reading answers, shared by the sync and async hooks.

Argument checks that must run before any request (page sizes, batch sizes, names), the executions
query, the tolerant reading of pages and of add/remove answers, and the conversion of listing items
into the shape the create calls return. No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._policy import path_segment, unreadable_answer_error
from abm_provider.models import BatchResult

#: The API refuses more accounts than this in one add or remove request.
MAX_ACCOUNTS_PER_REQUEST = 1000
FOLDERS_PATH = "/accountLists/v2/folders"
LISTS_PATH = "/accountLists/v2/accountLists"
EXPORT_JOBS_PATH = "/exports/v1/exportJobs"


def parse_json_object(
    *, method: str, path: str, http_status: int, body: bytes, request_id: str | None, idempotent: bool
) -> dict[str, Any]:
    """The answer body as a JSON object; anything else is an unreadable (retryable for reads) answer."""
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except ValueError as err:
        raise unreadable_answer_error(
            method=method,
            path=path,
            http_status=http_status,
            detail=f"invalid JSON: {err}",
            request_id=request_id,
            idempotent=idempotent,
        ) from None
    if not isinstance(data, dict):
        raise unreadable_answer_error(
            method=method,
            path=path,
            http_status=http_status,
            detail=f"a JSON {type(data).__name__}, not an object",
            request_id=request_id,
            idempotent=idempotent,
        )
    return data


def with_hint(err: AbmApiError, conn_id: str) -> AbmApiError:
    """Add the one thing a DAG author can do about errors whose cause is the connection."""
    if err.http_status == 401:
        err.message += f" - check the API key (password) of connection {conn_id!r}"
    elif err.http_status == 403 and err.status == "PERMISSION_DENIED":
        err.message += f" - the key of connection {conn_id!r} is valid but not allowed to do this"
    elif err.http_status is not None and 300 <= err.http_status < 400:
        err.message += " - the API answered with a redirect, which is not followed; check the base URL"
    return err


def page_items(page: Mapping[str, Any], key: str, path: str) -> tuple[list[dict[str, Any]], str]:
    """The items and ``nextPageToken`` of one page; a missing array is an empty page."""
    items = page.get(key)
    if items is None:
        items = []
    if not isinstance(items, list):
        raise AbmApiError(
            method="GET",
            path=path,
            http_status=200,
            status=None,
            message=f"the answer's {key!r} is a {type(items).__name__}, not an array",
        )
    token = page.get("nextPageToken") or ""
    return [item for item in items if isinstance(item, dict)], str(token)


class TokenGuard:
    """Stops a pager that is handed a token it already followed (a server bug would loop forever)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: set[str] = set()

    def check(self, token: str) -> None:
        if token in self.seen:
            raise AbmApiError(
                method="GET",
                path=self.path,
                http_status=200,
                status=None,
                message=f"the service returned page token {token[:40]!r} twice; stopping to avoid a loop",
            )
        self.seen.add(token)


def executions_request(
    export_type: str,
    *,
    state: str | None = None,
    order_by: str | None = "updateTime desc",
    page_size: int = 100,
    filter: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """Path and query of ``GET .../exportJobs/{type}/executions``, validated, for both hooks."""
    segment = path_segment(export_type, "export_type")
    if state is not None and filter is not None:
        raise ValueError("give state or filter, not both")
    if state is not None:
        if not isinstance(state, str) or not state.strip() or any(c.isspace() for c in state.strip()):
            raise ValueError(f"state must be one execution state such as 'COMPLETE', got {state!r}")
        filter = f"status={state.strip()}"
    check_page_size(page_size)
    params = {"pageSize": page_size, "orderBy": order_by or None, "filter": filter or None}
    return f"{EXPORT_JOBS_PATH}/{segment}/executions", params


def check_page_size(page_size: int) -> None:
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(
            f"page_size must be a whole number >= 1 (the service caps it at 100), got {page_size!r}"
        )


def _count(value: Any, default: int) -> int:
    """An int64 count, which the JSON gateway may encode as a string."""
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def folder_from_listing(item: Mapping[str, Any]) -> dict[str, Any]:
    """A folder from the listing (``uuid``/``name``) in the create answer's shape."""
    return {
        "folderId": item.get("uuid") or item.get("folderId") or item.get("id"),
        "displayName": item.get("name") if "name" in item else item.get("displayName"),
        "folderAccess": item.get("folderAccess"),
    }


def list_from_listing(item: Mapping[str, Any], folder_id: str) -> dict[str, Any]:
    """A list from the listing (``id``/``displayName``) in the create answer's shape."""
    return {
        "listId": item.get("id") or item.get("listId"),
        "listName": item.get("displayName") if "displayName" in item else item.get("listName"),
        "folderId": item.get("folderId") or folder_id,
    }


def batch_result(
    action: str, index: int, sent: list[dict[str, Any]], answer: Mapping[str, Any]
) -> BatchResult:
    """One add/remove answer as a :class:`BatchResult`, tolerating absent or string-encoded counts.

    Add answers ``{successfulAccounts, accountsNotFound, addedAccounts, duplicateAccounts}``; remove
    answers ``{accounts: [removed]}``. For a remove without ``accountsNotFound`` the accounts sent but
    not reported removed are the not-found ones, so none is lost from the totals.
    """
    not_found_raw = answer.get("accountsNotFound")
    not_found = [dict(a) for a in not_found_raw or [] if isinstance(a, Mapping)]
    if action == "add":
        # A thousand echoed accounts per request: JSON's dicts are taken as parsed, not copied.
        successful: list[dict[str, Any]] = [
            a if type(a) is dict else dict(a)
            for a in answer.get("successfulAccounts") or []
            if type(a) is dict or isinstance(a, Mapping)
        ]
        duplicates = _count(answer.get("duplicateAccounts"), 0)
        added = _count(answer.get("addedAccounts"), max(len(successful) - duplicates, 0))
        return BatchResult(index, len(sent), added, duplicates, not_found, successful)
    removed_raw = answer.get("accounts")
    removed = (
        [dict(a) for a in removed_raw if isinstance(a, Mapping)] if isinstance(removed_raw, list) else []
    )
    if not_found_raw is None:
        exact = {_identity(a) for a in removed}
        loose = {identity[1] for identity in exact if identity[0] is None}
        all_ids = {identity[1] for identity in exact}

        def was_removed(account: Mapping[str, Any]) -> bool:
            org, account_id = _identity(account)
            if org is None:  # sent without an org: any removed account with that id
                return account_id in all_ids
            return (org, account_id) in exact or account_id in loose

        not_found = [a for a in sent if not was_removed(a)]
    return BatchResult(index, len(sent), len(removed), 0, not_found, removed)


def _identity(account: Mapping[str, Any]) -> tuple[str | None, str]:
    """An account on a list is its id within its CRM org (the org may be absent from an echo)."""
    org = account.get("crmOrgId")
    return (str(org) if org else None, str(account.get("id")))


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


def check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValueError(f"batch_size must be a whole number, got {batch_size!r}")
    if not 1 <= batch_size <= MAX_ACCOUNTS_PER_REQUEST:
        raise ValueError(f"batch_size must be between 1 and {MAX_ACCOUNTS_PER_REQUEST}, got {batch_size}")


def check_name(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value
