"""A batch the service refuses for its content is split in halves until the refused accounts are found.

The service answers a whole add or remove request with ``400 INVALID_ARGUMENT`` when one of its
accounts is malformed by rules this provider cannot see in advance. Failing the batch would hold
back 999 good accounts for one bad one; sending them one by one would cost a thousand requests. Split
in halves, a batch with ``k`` bad accounts costs about ``2k log2(n)`` requests, and every good
account is sent.

Only a refusal of the content is split: a ``400`` that names a field outside ``accounts`` (or any
other error) is raised as it is, so a wrong list id or a broken connection does not send each
account alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.results import AccountsResult

#: The prefix of a field violation that names an account of the request (``accounts[3].id``).
_ACCOUNTS_FIELD = "accounts"


def refuses_content(err: BaseException) -> bool:
    """Whether ``err`` is the service refusing what the request's accounts hold.

    A ``400 INVALID_ARGUMENT`` (or a bare ``400`` with no error status) whose field violations, if it
    names any, are all about ``accounts``.
    """
    if not isinstance(err, AbmApiError) or err.http_status != 400:
        return False
    if err.status not in (None, "INVALID_ARGUMENT"):
        return False
    fields = [str(v.get("field", "")) for v in err.field_violations]
    return all(f.startswith(_ACCOUNTS_FIELD) for f in fields)


def refusal_reason(err: AbmApiError) -> str:
    """The reason kept for a refused account: the service's words, with the field it named."""
    named = "; ".join(
        f"{v.get('field')}: {v.get('description')}" for v in err.field_violations if v.get("description")
    )
    return f"refused by the service (400): {err.message}" + (f" ({named})" if named else "")


@dataclass
class SplitResult:
    """What the service answered to the accepted parts, and the positions it refused with why."""

    result: AccountsResult = field(default_factory=AccountsResult)
    refused: list[tuple[int, str]] = field(default_factory=list)

    def take(self, part: AccountsResult) -> None:
        """Add one accepted part's answer."""
        total = self.result
        total.sent += part.sent
        total.applied += part.applied
        total.duplicates += part.duplicates
        total.not_found_count += part.not_found_count
        total.not_found.extend(part.not_found)
        total.batches += part.batches


def send_splitting(
    send: Callable[[Sequence[Mapping[str, Any]]], AccountsResult],
    accounts: Sequence[Mapping[str, Any]],
) -> SplitResult:
    """Send ``accounts``; a part refused for its content is halved until each refusal is one account.

    ``refused`` holds the positions in ``accounts`` of the accounts refused on their own, with the
    service's reason; every other account was sent once in an accepted request.
    """
    out = SplitResult()
    pending: list[tuple[int, int]] = [(0, len(accounts))]
    while pending:
        start, end = pending.pop()
        try:
            out.take(send(accounts[start:end]))
        except AbmApiError as err:
            if not refuses_content(err):
                raise
            if end - start == 1:
                out.refused.append((start, refusal_reason(err)))
                continue
            middle = (start + end) // 2
            pending.append((middle, end))
            pending.append((start, middle))
    out.refused.sort()
    return out
