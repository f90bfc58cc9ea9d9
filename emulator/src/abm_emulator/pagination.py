"""AIP-158 pagination: opaque page tokens bound to the query that produced them.

A token holds the sort key of the last item scanned plus a hash of the other query parameters, so
a client that changes its filter or order between pages gets ``400`` instead of a silently wrong
page. Filtering scans the ordered set one window of ``pageSize`` items at a time, exactly as real
AIP-158 services do, so a page can be empty yet carry a token: clients must follow tokens until the
token is empty, never stop at the first short or empty page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from abm_emulator.errors import ApiError, invalid

T = TypeVar("T")
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 100


def effective_page_size(page_size: int | None) -> int:
    """0 or absent means the default; above the maximum is clamped; negative is an error."""
    if page_size is None or page_size == 0:
        return DEFAULT_PAGE_SIZE
    if page_size < 0:
        raise invalid("pageSize", f"must be >= 0, got {page_size}")
    return min(page_size, MAX_PAGE_SIZE)


def _params_hash(params: Mapping[str, Any]) -> str:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def encode_token(last_key: Sequence[Any], params: Mapping[str, Any]) -> str:
    raw = json.dumps({"after": list(last_key), "query": _params_hash(params)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_token(token: str, params: Mapping[str, Any]) -> list[Any]:
    """The sort key to resume after; ``400`` on a token that is damaged or from another query."""
    try:
        padded = token + "=" * (-len(token) % 4)
        decoded = json.loads(base64.urlsafe_b64decode(padded.encode()))
        after = decoded["after"]
        query = decoded["query"]
        if (
            not isinstance(after, list)
            or not all(isinstance(x, str) for x in after)
            or not isinstance(query, str)
        ):
            raise TypeError("bad token shape")
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeError):
        raise invalid("pageToken", "is not a token this service issued") from None
    if query != _params_hash(params):
        raise ApiError(
            400,
            "pageToken does not match the request: the other query parameters must equal those of the "
            "call that returned the token",
            "INVALID_ARGUMENT",
            [("pageToken", "was issued for a request with different query parameters")],
        )
    return after


def paginate(
    items: Sequence[T],
    sort_key: Callable[[T], tuple[Any, ...]],
    *,
    page_size: int | None,
    page_token: str | None,
    params: Mapping[str, Any],
    keep: Callable[[T], bool] = lambda _item: True,
    descending: bool = False,
) -> tuple[list[T], str]:
    """One page of ``items`` in ``sort_key`` order and the token for the next page (``""`` at the end)."""
    size = effective_page_size(page_size)
    ordered = sorted(items, key=sort_key, reverse=descending)
    start = 0
    if page_token:
        after = tuple(decode_token(page_token, params))
        if descending:
            start = next(
                (i for i, item in enumerate(ordered) if list(sort_key(item)) < list(after)), len(ordered)
            )
        else:
            start = next(
                (i for i, item in enumerate(ordered) if list(sort_key(item)) > list(after)), len(ordered)
            )
    window = ordered[start : start + size]
    page = [item for item in window if keep(item)]
    if start + size >= len(ordered) or not window:
        return page, ""
    return page, encode_token(sort_key(window[-1]), params)
