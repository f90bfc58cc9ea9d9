"""``abm_provider.hooks._paging``: the pages of a listing, read with no server; a repeated token ends it."""

from __future__ import annotations

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._paging import Pager
from abm_provider.hooks._pipeline import Call
from support.abm_connections import abm_pipeline


def test_pages_and_tokens() -> None:
    call = Call("GET", "/f", {"pageSize": 100})
    items, following = Pager(abm_pipeline(), call, "folders").read({"nextPageToken": "t"})
    assert items == [] and following is not None
    assert following.path == "/f" and following.query == {"pageSize": 100, "pageToken": "t"}
    last = Pager(abm_pipeline(), call, "folders").read({"folders": [{"a": 1}], "nextPageToken": ""})
    assert last == ([{"a": 1}], None)
    with pytest.raises(AbmApiError, match="not an array"):
        Pager(abm_pipeline(), call, "folders").read({"folders": {"a": 1}})
    pager = Pager(abm_pipeline(), call, "folders")
    pager.read({"nextPageToken": "a"})
    pager.read({"nextPageToken": "b"})
    with pytest.raises(AbmApiError, match="twice"):
        pager.read({"nextPageToken": "a"})
