"""The hook's download against a local server that breaks off and resumes: its byte count is checked
by the one rule (:func:`abm_provider.common.byte_count.check_byte_count`) as the body arrives."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.abm import AbmHook

BODY = bytes(range(100))
CUT = 40


class _Resumed(http.server.BaseHTTPRequestHandler):
    """The first answer announces all 100 bytes but sends 40 and hangs up; the resume (``Range``)
    answers the rest, or, with ``extra`` set, the rest and ``extra`` bytes more than it announced."""

    extra = 0
    seen: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        asked = self.headers.get("Range")
        self.seen.append(asked)
        if asked is None:
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", str(len(BODY)))
            self.send_header("ETag", '"v1"')
            self.end_headers()
            self.wfile.write(BODY[:CUT])
            self.close_connection = True
            return
        rest = BODY[CUT:] + b"x" * self.extra
        self.send_response(206)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Range", f"bytes {CUT}-{len(BODY) - 1}/{len(BODY)}")
        self.send_header("Content-Length", str(len(rest)))
        self.send_header("ETag", '"v1"')
        self.end_headers()
        self.wfile.write(rest)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def storage(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, type[_Resumed]]]:
    handler = type("Handler", (_Resumed,), {"seen": [], "extra": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv(
        "AIRFLOW_CONN_ABM_DEFAULT", json.dumps({"conn_type": "abm", "host": base, "password": "k"})
    )
    try:
        yield f"{base}/export.csv", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_body_cut_short_resumes_to_the_announced_count(storage: tuple[str, type[_Resumed]]) -> None:
    url, handler = storage
    out = io.BytesIO()
    result = AbmHook(retry_max_wait=0.1).download(url, out)
    assert out.getvalue() == BODY
    assert (result.bytes, result.content_length, result.resumed) == (len(BODY), len(BODY), 1)
    assert result.sha256 == hashlib.sha256(BODY).hexdigest()
    assert handler.seen == [None, f"bytes={CUT}-"]


def test_more_bytes_than_announced_fail_naming_both_counts(storage: tuple[str, type[_Resumed]]) -> None:
    url, handler = storage
    handler.extra = 20
    with pytest.raises(AbmApiError) as raised:
        AbmHook(retry_max_wait=0.1).download(url, io.BytesIO())
    assert raised.value.kind == "malformed"
    assert "the download received 120 bytes but the server announced 100" in str(raised.value)
    assert handler.seen == [None, f"bytes={CUT}-"], "an over-long answer is not asked for again"
