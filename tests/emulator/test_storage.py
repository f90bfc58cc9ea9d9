"""The object-storage origin: pre-signed links, S3-style refusals, ETag, Range and conditional requests.

Run in-process through httpx's ASGI transport; the real-server throughput and memory figures come from
scripts/measure_storage.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
import httpx
import pytest

from abm_emulator.storage import (
    CHUNK_SIZE,
    ByteRange,
    LinkCheck,
    LinkSigner,
    RangeNotSatisfiable,
    create_storage_app,
    object_path,
    parse_range,
)

KEY = "acct-alpha/0b9f6c1e-3d4a-4c7e-9a55-5a0f1f0e2b11.csv"
START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
TTL = 900
# More than two chunks, not a multiple of the chunk size: exercises read-ahead and the short last chunk.
CONTENT = bytes(range(256)) * ((2 * CHUNK_SIZE + 12_345) // 256) + b"tail"


class Clock:
    """The emulated clock the app consults; tests move it instead of sleeping."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def root(tmp_path: Path) -> Path:
    target = tmp_path / "objects" / KEY
    target.parent.mkdir(parents=True)
    target.write_bytes(CONTENT)
    (tmp_path / "secret.txt").write_text("outside the storage root")
    return tmp_path / "objects"


@pytest.fixture
def signer() -> LinkSigner:
    return LinkSigner(b"storage-test-secret", TTL)


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
async def client(root: Path, signer: LinkSigner, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_storage_app(root, signer, clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://storage.test") as c:
        yield c


def url(signer: LinkSigner, key: str = KEY, now: datetime = START) -> str:
    return f"/{key}?{signer.sign(key, now)}"


def error_code(response: httpx.Response) -> str:
    assert response.headers["content-type"] == "application/xml"
    element = ET.fromstring(response.content)
    assert element.tag == "Error"
    code = element.findtext("Code")
    assert code
    return code


async def test_get_serves_the_whole_object_with_s3_headers(
    client: httpx.AsyncClient, signer: LinkSigner
) -> None:
    response = await client.get(url(signer))
    assert response.status_code == 200
    assert response.content == CONTENT
    assert int(response.headers["content-length"]) == len(CONTENT)
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["content-type"].startswith("text/csv")
    etag = response.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert response.headers["x-amz-request-id"]


async def test_head_gives_the_headers_without_a_body(client: httpx.AsyncClient, signer: LinkSigner) -> None:
    got = await client.get(url(signer))
    response = await client.head(url(signer))
    assert response.status_code == 200
    assert response.content == b""
    assert int(response.headers["content-length"]) == len(CONTENT)
    assert response.headers["etag"] == got.headers["etag"]


async def test_etag_is_stable_for_the_file_and_changes_with_it(
    client: httpx.AsyncClient, signer: LinkSigner, root: Path, clock: Clock
) -> None:
    first = (await client.head(url(signer))).headers["etag"]
    assert (await client.get(url(signer))).headers["etag"] == first
    # Another app instance over the same file (an emulator restart) agrees.
    other = create_storage_app(root, signer, clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=other), base_url="http://x") as second:
        assert (await second.head(url(signer))).headers["etag"] == first
    # Rewritten the way the emulator writes objects (new file renamed over the old one).
    replacement = root / "replacement.tmp"
    replacement.write_bytes(CONTENT[::-1])
    os.replace(replacement, root / KEY)
    assert (await client.head(url(signer))).headers["etag"] != first


async def test_authorization_header_is_refused_with_400(
    client: httpx.AsyncClient, signer: LinkSigner
) -> None:
    response = await client.get(url(signer), headers={"Authorization": "Bearer abm-demo-key"})
    assert response.status_code == 400
    assert error_code(response) == "InvalidArgument"
    assert CONTENT[:100] not in response.content


async def test_link_works_until_expiry_and_answers_403_after(
    client: httpx.AsyncClient, signer: LinkSigner, clock: Clock
) -> None:
    link = url(signer)
    clock.now = START + timedelta(seconds=TTL)
    assert (await client.head(link)).status_code == 200
    clock.now = START + timedelta(seconds=TTL + 1)
    response = await client.get(link)
    assert response.status_code == 403
    assert error_code(response) == "AccessDenied"
    assert b"expired" in response.content
    # A fresh link signed at the new emulated time works again.
    assert (await client.head(url(signer, now=clock.now))).status_code == 200


def _tamper(link: str, **changes: str) -> str:
    path, _, query = link.partition("?")
    params = {k: v[0] for k, v in parse_qs(query).items()}
    params.update(changes)
    return path + "?" + "&".join(f"{k}={v}" for k, v in params.items())


@pytest.mark.parametrize(
    ("make_link", "code"),
    [
        pytest.param(
            lambda s: _tamper(url(s), **{"X-Signature": "0" * 64}), "SignatureDoesNotMatch", id="signature"
        ),
        pytest.param(
            lambda s: _tamper(url(s), **{"X-Expires": str(int(START.timestamp()) + 10 * TTL)}),
            "SignatureDoesNotMatch",
            id="extended-expiry",
        ),
        pytest.param(
            lambda s: f"/{KEY}?" + s.sign("acct-beta/other.csv", START),
            "SignatureDoesNotMatch",
            id="other-key",
        ),
        pytest.param(
            lambda s: url(LinkSigner(b"another-secret", TTL)), "SignatureDoesNotMatch", id="other-secret"
        ),
        pytest.param(lambda s: f"/{KEY}", "AccessDenied", id="unsigned"),
        pytest.param(
            lambda s: _tamper(url(s), **{"X-Expires": "soon"}),
            "AuthorizationQueryParametersError",
            id="malformed",
        ),
        pytest.param(
            lambda s: url(s) + "&X-Signature=" + "1" * 64,
            "AuthorizationQueryParametersError",
            id="duplicated",
        ),
    ],
)
async def test_tampered_or_missing_signature_is_403(
    client: httpx.AsyncClient, signer: LinkSigner, make_link: Any, code: str
) -> None:
    response = await client.get(make_link(signer))
    assert response.status_code == 403
    assert error_code(response) == code
    assert CONTENT[:100] not in response.content


async def test_unknown_object_is_404(client: httpx.AsyncClient, signer: LinkSigner, root: Path) -> None:
    response = await client.get(url(signer, "acct-alpha/missing.csv"))
    assert response.status_code == 404
    assert error_code(response) == "NoSuchKey"
    # A directory is not an object either.
    assert (await client.get(url(signer, "acct-alpha"))).status_code == 404


async def test_presigned_url_encodes_keys_the_app_decodes(
    root: Path, signer: LinkSigner, clock: Clock
) -> None:
    key = "Café Zürich/execution 1.csv"
    (root / key).parent.mkdir()
    (root / key).write_bytes(b"date\n")
    link = signer.presigned_url("http://storage.test/", key, START)
    assert link.startswith("http://storage.test/Caf%C3%A9%20Z%C3%BCrich/execution%201.csv?X-Expires=")
    app = create_storage_app(root, signer, clock)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as c:
        response = await c.get(link)
    assert response.status_code == 200
    assert response.content == b"date\n"


async def _call(app: Any, path: str, query: bytes, method: str = "GET") -> tuple[int, bytes]:
    """Drive the ASGI app with a raw scope, as a server would after decoding the path."""
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": query, "headers": []}
    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return messages[0]["status"], body


@pytest.mark.parametrize(
    "key",
    [
        "../secret.txt",
        "acct-alpha/../../secret.txt",
        "./secret.txt",
        "acct-alpha//x.csv",
        "a\\..\\secret.txt",
    ],
)
async def test_path_traversal_is_refused_even_when_signed(
    root: Path, signer: LinkSigner, clock: Clock, key: str
) -> None:
    app = create_storage_app(root, signer, clock)
    status, body = await _call(app, "/" + key, signer.sign(key, START).encode())
    assert status == 400
    assert b"InvalidObjectName" in body
    assert b"outside the storage root" not in body


def test_object_path_keeps_keys_inside_the_root(root: Path) -> None:
    assert object_path(root, KEY) == (root / KEY).resolve()
    for bad in ["", "/etc/passwd", "..", "a/../../b", "a/./b", "a/", "a\x00b"]:
        assert object_path(root, bad) is None, bad
    # A symlink inside the root that points outside it is not followed out.
    (root / "escape").symlink_to(root.parent)
    assert object_path(root, "escape/secret.txt") is None


async def test_other_methods_are_405(root: Path, signer: LinkSigner, clock: Clock) -> None:
    app = create_storage_app(root, signer, clock)
    status, body = await _call(app, "/" + KEY, signer.sign(KEY, START).encode(), method="PUT")
    assert status == 405
    assert b"MethodNotAllowed" in body


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=0-99", 0, 99),
        ("bytes=100-", 100, len(CONTENT) - 1),
        ("bytes=-100", len(CONTENT) - 100, len(CONTENT) - 1),
        ("bytes=10-10", 10, 10),
        ("bytes=5-999999999999", 5, len(CONTENT) - 1),
        ("bytes=-999999999999", 0, len(CONTENT) - 1),
        (f"bytes={CHUNK_SIZE - 7}-{2 * CHUNK_SIZE + 9}", CHUNK_SIZE - 7, 2 * CHUNK_SIZE + 9),
    ],
)
async def test_single_range_is_206_with_content_range(
    client: httpx.AsyncClient, signer: LinkSigner, header: str, first: int, last: int
) -> None:
    response = await client.get(url(signer), headers={"Range": header})
    assert response.status_code == 206
    assert response.headers["content-range"] == f"bytes {first}-{last}/{len(CONTENT)}"
    assert int(response.headers["content-length"]) == last - first + 1
    assert response.content == CONTENT[first : last + 1]


@pytest.mark.parametrize(
    "header", [f"bytes={len(CONTENT)}-", f"bytes={len(CONTENT) + 5}-{len(CONTENT) + 9}", "bytes=-0"]
)
async def test_unsatisfiable_range_is_416(client: httpx.AsyncClient, signer: LinkSigner, header: str) -> None:
    response = await client.get(url(signer), headers={"Range": header})
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{len(CONTENT)}"
    assert error_code(response) == "InvalidRange"


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "bytes=abc", "items=0-5", "bytes=9-3", "bytes=-"])
async def test_unsupported_or_malformed_range_serves_the_whole_object(
    client: httpx.AsyncClient, signer: LinkSigner, header: str
) -> None:
    response = await client.get(url(signer), headers={"Range": header})
    assert response.status_code == 200
    assert response.content == CONTENT


async def test_resume_with_if_match_and_range(client: httpx.AsyncClient, signer: LinkSigner) -> None:
    etag = (await client.head(url(signer))).headers["etag"]
    response = await client.get(url(signer), headers={"Range": "bytes=1000-", "If-Match": etag})
    assert response.status_code == 206
    assert response.content == CONTENT[1000:]
    assert (await client.get(url(signer), headers={"If-Match": "*"})).status_code == 200
    assert (await client.get(url(signer), headers={"If-Match": f'"other", {etag}'})).status_code == 200


async def test_if_match_mismatch_is_412(client: httpx.AsyncClient, signer: LinkSigner) -> None:
    response = await client.get(url(signer), headers={"Range": "bytes=1000-", "If-Match": '"stale-etag"'})
    assert response.status_code == 412
    assert error_code(response) == "PreconditionFailed"
    # A weak validator never matches If-Match (strong comparison).
    etag = (await client.head(url(signer))).headers["etag"]
    assert (await client.get(url(signer), headers={"If-Match": "W/" + etag})).status_code == 412


async def test_if_range_honours_range_only_for_the_current_validator(
    client: httpx.AsyncClient, signer: LinkSigner
) -> None:
    head = await client.head(url(signer))
    current = await client.get(url(signer), headers={"Range": "bytes=0-9", "If-Range": head.headers["etag"]})
    assert current.status_code == 206
    assert current.content == CONTENT[:10]
    by_date = await client.get(
        url(signer), headers={"Range": "bytes=0-9", "If-Range": head.headers["last-modified"]}
    )
    assert by_date.status_code == 206
    stale = await client.get(url(signer), headers={"Range": "bytes=0-9", "If-Range": '"stale-etag"'})
    assert stale.status_code == 200
    assert stale.content == CONTENT


async def test_if_none_match_current_etag_is_304(client: httpx.AsyncClient, signer: LinkSigner) -> None:
    etag = (await client.head(url(signer))).headers["etag"]
    response = await client.get(url(signer), headers={"If-None-Match": etag})
    assert response.status_code == 304
    assert response.content == b""
    assert (await client.get(url(signer), headers={"If-None-Match": '"other"'})).status_code == 200


async def test_empty_object_is_served_and_any_range_on_it_is_416(
    root: Path, signer: LinkSigner, client: httpx.AsyncClient
) -> None:
    (root / "acct-alpha" / "empty.csv").write_bytes(b"")
    link = url(signer, "acct-alpha/empty.csv")
    whole = await client.get(link)
    assert whole.status_code == 200
    assert whole.headers["content-length"] == "0"
    assert (await client.get(link, headers={"Range": "bytes=-5"})).status_code == 416


async def test_client_disconnect_stops_streaming(root: Path, signer: LinkSigner, clock: Clock) -> None:
    """A client that goes away mid-body must not make the server read and send the rest of the file."""
    big = root / "acct-alpha" / "big.csv"
    with big.open("wb") as f:
        f.truncate(64 * CHUNK_SIZE)
    app = create_storage_app(root, signer, clock)
    first_body = anyio.Event()
    sent: list[int] = []

    async def receive() -> dict[str, Any]:
        await first_body.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(len(message["body"]))
            first_body.set()
            await anyio.sleep(0.01)

    key = "acct-alpha/big.csv"
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/" + key,
        "query_string": signer.sign(key, START).encode(),
        "headers": [],
    }
    with anyio.fail_after(30):
        await app(scope, receive, send)
    assert 0 < sum(sent) < 8 * CHUNK_SIZE


def test_parse_range_rules() -> None:
    assert parse_range("bytes=0-0", 10) == ByteRange(0, 0)
    assert parse_range(" bytes = 2 - 4 ", 10) == ByteRange(2, 4)
    assert parse_range("BYTES=7-", 10) == ByteRange(7, 9)
    assert parse_range("bytes=-3", 10) == ByteRange(7, 9)
    assert parse_range("bytes=1-2,4-5", 10) is None
    with pytest.raises(RangeNotSatisfiable):
        parse_range("bytes=10-", 10)
    with pytest.raises(RangeNotSatisfiable):
        parse_range("bytes=-1", 0)


def test_signer_verify_outcomes(signer: LinkSigner) -> None:
    query = parse_qs(signer.sign(KEY, START))
    assert signer.verify(KEY, query, START) is LinkCheck.VALID
    assert signer.verify(KEY, query, START + timedelta(seconds=TTL + 1)) is LinkCheck.EXPIRED
    assert signer.verify("acct-alpha/other.csv", query, START) is LinkCheck.BAD_SIGNATURE
    assert signer.verify(KEY, {}, START) is LinkCheck.MISSING
    assert signer.verify(KEY, {"X-Expires": ["1"]}, START) is LinkCheck.MALFORMED
    # Naive datetimes are read as UTC, like the emulator's clock.
    assert signer.verify(KEY, query, START.replace(tzinfo=None)) is LinkCheck.VALID


@pytest.mark.parametrize(("secret", "ttl"), [(b"", 900), (b"k", 0), (b"k", -5)])
def test_signer_rejects_unusable_settings(secret: bytes, ttl: int) -> None:
    with pytest.raises(ValueError, match="secret|ttl_seconds"):
        LinkSigner(secret, ttl)


def test_real_server_streams_a_rendered_export_with_bounded_memory() -> None:
    """Through uvicorn and curl: full and ranged downloads are byte-complete and the server stays small.

    Runs scripts/measure_storage.py with no speed target (tests never judge wall time); the script
    checks the byte counts and status codes itself and fails when the server's peak RSS exceeds 200 MiB.
    """
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    script = Path(__file__).resolve().parents[2] / "scripts" / "measure_storage.py"
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--size",
            "64MiB",
            "--runs",
            "1",
            "--min-mbps",
            "0",
            "--max-rss-mib",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("MEASURE_STORAGE "))
    result = json.loads(line.removeprefix("MEASURE_STORAGE "))
    assert result["file_bytes"] > 60 * 2**20
    assert result["server_vmhwm_mib"] < 200
