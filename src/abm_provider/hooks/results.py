"""Results the hook returns for batched membership changes and downloads.

Plain dataclasses rather than raw response dicts: the add and remove endpoints answer in different
shapes (``addedAccounts``/``duplicateAccounts`` against a list of removed accounts), and callers such
as the membership operators want one set of totals whichever they called. They hold only primitives,
lists and dicts, so ``dataclasses.asdict`` turns them into an XCom-safe value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The answer to one add or remove request (at most 1000 accounts).

    :param index: 0-based position of the batch within the call.
    :param sent: accounts sent in this request.
    :param applied: accounts the request changed: added by an add, removed by a remove.
    :param duplicates: accounts already on the list (always 0 for a remove).
    :param not_found: accounts the service did not act on because it does not know them (for a
        remove: those it did not report as removed), as the service echoed them or as sent.
    :param successful: accounts the service reports as handled, as it echoed them.
    """

    index: int
    sent: int
    applied: int
    duplicates: int
    not_found: list[dict[str, Any]] = field(default_factory=list)
    successful: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class AccountsResult:
    """Totals over all the requests of one ``add_accounts``/``remove_accounts`` call.

    :param sent: accounts sent.
    :param applied: accounts changed: added by ``add_accounts``, removed by ``remove_accounts``.
    :param duplicates: accounts that were already on the list.
    :param not_found_count: accounts the service did not know (counted even when not kept).
    :param not_found: those accounts, when the call kept them (``keep_not_found=True``).
    :param batches: number of requests made.
    """

    sent: int = 0
    applied: int = 0
    duplicates: int = 0
    not_found_count: int = 0
    not_found: list[dict[str, Any]] = field(default_factory=list)
    batches: int = 0

    def include(self, batch: BatchResult, *, keep_not_found: bool) -> None:
        """Add one request's figures to the totals."""
        self.sent += batch.sent
        self.applied += batch.applied
        self.duplicates += batch.duplicates
        self.not_found_count += len(batch.not_found)
        if keep_not_found:
            self.not_found.extend(batch.not_found)
        self.batches += 1


@dataclass(frozen=True, slots=True)
class DownloadResult:
    """What a finished download wrote.

    :param bytes: bytes written to the file object.
    :param sha256: hex SHA-256 of those bytes, for a load ledger or an integrity check.
    :param etag: the storage origin's ``ETag`` (quotes kept), or ``None`` when it sent none.
    :param content_length: the size the origin announced, or ``None`` when it announced none; when
        set, ``bytes`` equals it (a shorter body is resumed or fails).
    :param resumed: how many times the transfer resumed with ``Range`` after a dropped connection.
    """

    bytes: int
    sha256: str
    etag: str | None
    content_length: int | None
    resumed: int


def _count(value: Any, default: int) -> int:
    """An int64 count, which the JSON gateway may encode as a string."""
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


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
