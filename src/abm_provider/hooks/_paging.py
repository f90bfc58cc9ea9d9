"""The pages of one listing, read through either hook's driver: which call comes next, and when to
stop. No I/O here; a listing that would never end is the server's bug, so it is bounded.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._pipeline import Call, Pipeline


class Pager:
    """The pages of one listing, without I/O: which call comes next, and when to stop. Bounded by
    ``max_pages``, by a token seen among the last ``page_cursor_memory`` (a loop), and by a caller's
    ``deadline`` (POSIX time), checked between pages so a look never overruns a sensor's timeout.
    """

    def __init__(self, pipeline: Pipeline, call: Call, key: str, deadline: float | None = None) -> None:
        self.pipeline = pipeline
        self.call = replace(call, deadline=deadline) if deadline is not None else call
        self.key = key
        self.deadline = deadline
        self.pages = 0
        self._recent: deque[str] = deque(maxlen=pipeline.limits.page_cursor_memory)
        self._seen: set[str] = set()

    def _stop(self, message: str, kind: str = "paging") -> AbmApiError:
        return self.pipeline.error(self.call, kind, message)

    def read(self, page: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Call | None]:
        """The page's items and the call for the next page (``None`` after the last)."""
        self.pages += 1
        items = page.get(self.key)
        if items is None:
            items = []
        if not isinstance(items, list):
            raise self._stop(
                f"the answer's {self.key!r} is a {type(items).__name__}, not an array", "malformed"
            )
        token = page.get("nextPageToken") or ""
        if not isinstance(token, str):
            raise self._stop(f"nextPageToken is a {type(token).__name__}, not a string", "malformed")
        found = [item for item in items if type(item) is dict]
        if not token:
            return found, None
        if token in self._seen:
            raise self._stop(
                f"the service returned page token {token[:40]!r} twice; stopping to avoid a loop"
            )
        if self.pages >= self.pipeline.limits.max_pages:
            raise self._stop(
                f"the listing did not end within max_pages={self.pipeline.limits.max_pages} pages; "
                "raise max_pages if it really is that long"
            )
        if self.deadline is not None and time.time() >= self.deadline:
            raise self._stop(f"the caller's deadline passed after {self.pages} pages", "timeout")

        if len(self._recent) == self._recent.maxlen:
            self._seen.discard(self._recent[0])
        self._recent.append(token)
        self._seen.add(token)
        return found, self.call.next_page(token)
