"""Controls for the hostile suite: legitimate traffic its bounds must let through.

They passed before the bounds existed and must keep passing; they live apart from
``tests/reliability/hostile/``, where every test failed before the HTTP boundary was rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..hostile.checks import assert_no_secret, key_forms, signed_link, sync_call
from ..hostile.runs import Against
from ..hostile.servers import HostileServer, MiB
from ..hostile.test_more import SETTINGS as MORE_SETTINGS
from ..hostile.test_more import big_json
from ..hostile.test_redirects import CSV, SETTINGS, assert_nothing_reached, redirect_to, serve_csv


def test_download_follows_a_safe_redirect_without_the_key(
    hostile: Against,
    network_guard: list[str],
    caplog: pytest.LogCaptureFixture,
    destination: Path,
) -> None:
    """The control: one hop to another loopback origin is followed, and nobody gets the key."""
    with HostileServer(serve_csv) as origin:
        hop = redirect_to(lambda r: signed_link(origin.url, "/real/file.csv"))
        run = hostile.download(hop, operator=True, **SETTINGS)
    assert run.err is None, f"the download failed: {run.err!r}"
    assert destination.read_bytes() == CSV
    assert run.result["bytes"] == len(CSV)
    storage = run.server
    assert run.api.request_count == 0 and storage.request_count == 1 and origin.request_count == 1
    assert_nothing_reached(network_guard, storage, origin)
    assert_no_secret(None, caplog, key_forms())


def test_sync_success_body_under_the_default_limit_is_read(connect: Any) -> None:
    """The control: 2 MiB is a valid (if large) page under the default 32 MiB."""
    with HostileServer(big_json(2 * MiB, framing="length")) as srv:
        conn_id = connect(srv.url, **MORE_SETTINGS)
        assert sync_call(conn_id, "iter_folders")() == []
