"""Results the hook returns for batched membership changes and downloads.

Plain dataclasses rather than raw response dicts: the add and remove endpoints answer in different
shapes (``addedAccounts``/``duplicateAccounts`` against a list of removed accounts), and callers such
as the membership operators want one set of totals whichever they called. They hold only primitives,
lists and dicts, so ``dataclasses.asdict`` turns them into an XCom-safe value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The answer to one add or remove request (at most 1000 accounts).

    :param index: 0-based position of the batch within the call.
    :param sent: accounts sent in this request.
    :param added: accounts added (for a remove: accounts removed).
    :param duplicates: accounts already on the list (always 0 for a remove).
    :param not_found: accounts the service did not act on because it does not know them (for a
        remove: those it did not report as removed), as the service echoed them or as sent.
    :param successful: accounts the service reports as handled, as it echoed them.
    """

    index: int
    sent: int
    added: int
    duplicates: int
    not_found: list[dict[str, Any]] = field(default_factory=list)
    successful: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class AccountsResult:
    """Totals over all the requests of one ``add_accounts``/``remove_accounts`` call.

    :param sent: accounts sent.
    :param added: accounts added (for a remove: removed).
    :param duplicates: accounts that were already on the list.
    :param not_found_count: accounts the service did not know (counted even when not kept).
    :param not_found: those accounts, when the call kept them (``keep_not_found=True``).
    :param batches: number of requests made.
    """

    sent: int = 0
    added: int = 0
    duplicates: int = 0
    not_found_count: int = 0
    not_found: list[dict[str, Any]] = field(default_factory=list)
    batches: int = 0

    def include(self, batch: BatchResult, *, keep_not_found: bool) -> None:
        """Add one request's figures to the totals."""
        self.sent += batch.sent
        self.added += batch.added
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
