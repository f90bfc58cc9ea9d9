"""The object-storage origin that serves ``downloadUri``: pre-signed, S3-like, streaming.

docs/service-behaviour.md "Downloads" asks for S3's observable behaviour, because that is what the
real service hands out and what the provider's download code must survive:

* a request carrying an ``Authorization`` header is refused with ``400`` (S3 rejects a request that is
  authenticated twice), which catches clients that leak the API key to this origin;
* an expired or tampered link answers ``403``, judged by the emulator's *emulated* clock so tests can
  expire a link by advancing time instead of sleeping;
* ``Content-Length``, a strong ``ETag``, ``Accept-Ranges`` and single byte ranges (``206``/``416``) with
  ``If-Match``/``If-Range``, which the provider's resumable download relies on.

Error bodies are S3's XML (``<Error><Code>..</Code><Message>..</Message>..</Error>``).

It is a plain ASGI callable (no framework routing) because it serves one kind of request and must move
gigabytes: files are read with ``os.pread`` in a worker thread in 2 MiB chunks, the next chunk is read
while the previous one is being sent, and the server's flow control bounds what is buffered, so memory
stays flat whatever the file size.
"""

from __future__ import annotations

import email.utils
import hashlib
import hmac
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path, PurePosixPath
from stat import S_ISREG
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import anyio
import anyio.to_thread

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

EXPIRES_PARAM = "X-Expires"
SIGNATURE_PARAM = "X-Signature"
CHUNK_SIZE = 2 << 20
"""Bytes per read and per ASGI body message: large enough that per-chunk overhead is negligible."""


class LinkCheck(Enum):
    """Outcome of checking a pre-signed link."""

    VALID = "valid"
    MISSING = "missing"
    MALFORMED = "malformed"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"


def _epoch_seconds(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


class LinkSigner:
    """HMAC-SHA256 pre-signed links: ``X-Expires`` (Unix seconds) and ``X-Signature`` (hex).

    The signature covers the object key and the expiry, so neither can be changed; it does not cover
    the method, so one link serves both ``GET`` and ``HEAD``.  ``now`` is passed in (not read from the
    wall clock) because the emulator runs on an emulated clock.
    """

    def __init__(self, secret: bytes, ttl_seconds: int) -> None:
        if not secret:
            raise ValueError("LinkSigner secret must not be empty")
        if ttl_seconds <= 0:
            raise ValueError(f"LinkSigner ttl_seconds must be positive, got {ttl_seconds}")
        self._secret = secret
        self.ttl_seconds = ttl_seconds

    def _signature(self, object_key: str, expires: int) -> str:
        message = f"{object_key}\n{expires}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def sign(self, object_key: str, now: datetime) -> str:
        """The query string (without ``?``) that makes ``object_key`` readable until ``now + ttl``."""
        expires = _epoch_seconds(now) + self.ttl_seconds
        return urlencode({EXPIRES_PARAM: expires, SIGNATURE_PARAM: self._signature(object_key, expires)})

    def presigned_url(self, base_url: str, object_key: str, now: datetime) -> str:
        """``base_url/<percent-encoded key>?<signature>``: the form the emulator puts in ``downloadUri``."""
        return f"{base_url.rstrip('/')}/{quote(object_key, safe='/')}?{self.sign(object_key, now)}"

    def verify(self, object_key: str, query: Mapping[str, list[str]], now: datetime) -> LinkCheck:
        """Check a request's parsed query (``parse_qs`` form) for ``object_key`` at ``now``.

        The signature is checked before the expiry so an expiry value is only trusted once it is signed.
        """
        expires_values = query.get(EXPIRES_PARAM)
        signature_values = query.get(SIGNATURE_PARAM)
        if not expires_values and not signature_values:
            return LinkCheck.MISSING
        if (
            expires_values is None
            or signature_values is None
            or len(expires_values) != 1
            or len(signature_values) != 1
            or not expires_values[0].isdigit()
        ):
            return LinkCheck.MALFORMED
        expires = int(expires_values[0])
        if not hmac.compare_digest(self._signature(object_key, expires), signature_values[0]):
            return LinkCheck.BAD_SIGNATURE
        if _epoch_seconds(now) > expires:
            return LinkCheck.EXPIRED
        return LinkCheck.VALID


def object_path(root: Path, object_key: str) -> Path | None:
    """The file for ``object_key`` under ``root``, or ``None`` if the key could escape ``root``.

    Keys are relative POSIX paths of plain segments (``acct/<execution-id>.csv``): no ``..``, ``.``,
    empty segment, backslash or NUL, and the resolved path must stay inside the resolved root.
    """
    if not object_key or "\\" in object_key or "\x00" in object_key or object_key.startswith("/"):
        return None
    parts = object_key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    resolved_root = root.resolve()
    candidate = (resolved_root / PurePosixPath(*parts)).resolve()
    if candidate == resolved_root or resolved_root not in candidate.parents:
        return None
    return candidate


def etag_for(stat: os.stat_result) -> str:
    """A strong ETag from the file's identity, size and modification time.

    Hashing the content would cost seconds per GiB on the first request; the emulator writes every
    object once (under a fresh name, by rename), so identity + size + mtime changes whenever content
    does and stays the same for as long as the file is unchanged.
    """
    basis = f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}".encode()
    return '"' + hashlib.sha256(basis).hexdigest()[:32] + '"'


@dataclass(frozen=True)
class ByteRange:
    """An inclusive byte range of a representation, as in ``Content-Range: bytes first-last/size``."""

    first: int
    last: int

    @property
    def length(self) -> int:
        return self.last - self.first + 1


class RangeNotSatisfiable(Exception):
    """The ``Range`` header is well formed but selects no byte of the representation."""


def parse_range(header: str, size: int) -> ByteRange | None:
    """Interpret a ``Range`` header for a representation of ``size`` bytes.

    Returns ``None`` when the header should be ignored and the whole representation served (not a
    ``bytes`` range, malformed, or several ranges, which S3 does not support either); raises
    :class:`RangeNotSatisfiable` for a single well-formed range that selects nothing.
    """
    unit, sep, spec = header.strip().partition("=")
    if not sep or unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_text, dash, last_text = spec.strip().partition("-")
    first_text, last_text = first_text.strip(), last_text.strip()
    if not dash or (first_text and not first_text.isdigit()) or (last_text and not last_text.isdigit()):
        return None
    if not first_text:
        if not last_text:
            return None
        suffix = int(last_text)
        if suffix == 0 or size == 0:
            raise RangeNotSatisfiable
        return ByteRange(max(0, size - suffix), size - 1)
    first = int(first_text)
    if last_text and int(last_text) < first:
        return None
    if first >= size:
        raise RangeNotSatisfiable
    last = min(int(last_text), size - 1) if last_text else size - 1
    return ByteRange(first, last)


def _etag_matches(header: str, etag: str) -> bool:
    """Strong comparison against a comma-separated ``If-Match`` list (``*`` matches any)."""
    candidates = [c.strip() for c in header.split(",")]
    return "*" in candidates or etag in candidates


def _weak_matches(header: str, etag: str) -> bool:
    """Weak comparison for ``If-None-Match``: ``W/`` prefixes are ignored."""
    candidates = [c.strip().removeprefix("W/") for c in header.split(",")]
    return "*" in candidates or etag in candidates


def _error_xml(code: str, message: str, resource: str, request_id: str) -> bytes:
    def esc(text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{esc(code)}</Code><Message>{esc(message)}</Message>"
        f"<Resource>{esc(resource)}</Resource><RequestId>{request_id}</RequestId></Error>"
    ).encode()


_LINK_ERRORS: dict[LinkCheck, tuple[str, str]] = {
    LinkCheck.MISSING: ("AccessDenied", "Access Denied: the request is not pre-signed"),
    LinkCheck.MALFORMED: ("AuthorizationQueryParametersError", "X-Expires and X-Signature must appear once"),
    LinkCheck.BAD_SIGNATURE: (
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided",
    ),
    LinkCheck.EXPIRED: ("AccessDenied", "Request has expired"),
}


def create_storage_app(root: Path, signer: LinkSigner, clock: Callable[[], datetime]) -> ASGIApp:
    """An ASGI app serving ``GET``/``HEAD /{object_key}`` from ``root / object_key`` behind signed links."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise RuntimeError(f"storage app only serves http, not {scope['type']!r}")
        await _serve(scope, receive, send, root, signer, clock)

    return app


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _serve(
    scope: Scope, receive: Receive, send: Send, root: Path, signer: LinkSigner, clock: Callable[[], datetime]
) -> None:
    request_id = uuid.uuid4().hex.upper()[:16]
    method: str = scope["method"]
    path: str = scope["path"]
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    object_key = path.removeprefix("/")
    head_only = method == "HEAD"

    async def error(
        status: int, code: str, message: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        body = _error_xml(code, message, path, request_id)
        response_headers = [
            (b"content-type", b"application/xml"),
            (b"content-length", str(len(body)).encode()),
            (b"x-amz-request-id", request_id.encode()),
            *(extra or []),
        ]
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": b"" if head_only else body})

    if method not in ("GET", "HEAD"):
        await error(
            405,
            "MethodNotAllowed",
            f"The specified method is not allowed: {method}",
            [(b"allow", b"GET, HEAD")],
        )
        return
    if "authorization" in headers:
        await error(
            400,
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Signature query parameter should be specified",
        )
        return
    file_path = object_path(root, object_key)
    if file_path is None:
        await error(400, "InvalidObjectName", f"Object key {object_key!r} is not a valid object name")
        return
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    check = signer.verify(object_key, query, clock())
    if check is not LinkCheck.VALID:
        code, message = _LINK_ERRORS[check]
        await error(403, code, message)
        return
    try:
        fd = os.open(file_path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        await error(404, "NoSuchKey", "The specified key does not exist.")
        return
    try:
        stat = os.fstat(fd)
        if not S_ISREG(stat.st_mode):
            await error(404, "NoSuchKey", "The specified key does not exist.")
            return
        await _send_object(receive, send, fd, stat, headers, head_only, request_id, error)
    finally:
        os.close(fd)


async def _send_object(
    receive: Receive,
    send: Send,
    fd: int,
    stat: os.stat_result,
    headers: Mapping[str, str],
    head_only: bool,
    request_id: str,
    error: Callable[..., Awaitable[None]],
) -> None:
    size = stat.st_size
    etag = etag_for(stat)
    last_modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
    common = [
        (b"etag", etag.encode()),
        (b"last-modified", last_modified.encode()),
        (b"accept-ranges", b"bytes"),
        (b"x-amz-request-id", request_id.encode()),
    ]
    if_match = headers.get("if-match")
    if if_match is not None and not _etag_matches(if_match, etag):
        await error(
            412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold"
        )
        return
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None and _weak_matches(if_none_match, etag):
        await send({"type": "http.response.start", "status": 304, "headers": common})
        await send({"type": "http.response.body", "body": b""})
        return
    selected: ByteRange | None = None
    range_header = headers.get("range")
    if_range = headers.get("if-range")
    use_range = range_header is not None and (if_range is None or if_range.strip() in (etag, last_modified))
    if use_range and range_header is not None:
        try:
            selected = parse_range(range_header, size)
        except RangeNotSatisfiable:
            await error(
                416,
                "InvalidRange",
                "The requested range is not satisfiable",
                [(b"content-range", f"bytes */{size}".encode()), *common[:1]],
            )
            return
    content_type = b"text/csv; charset=utf-8"
    if selected is None:
        status, first, length = 200, 0, size
        extra: list[tuple[bytes, bytes]] = []
    else:
        status, first, length = 206, selected.first, selected.length
        extra = [(b"content-range", f"bytes {selected.first}-{selected.last}/{size}".encode())]
    response_headers = [
        (b"content-type", content_type),
        (b"content-length", str(length).encode()),
        *common,
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": response_headers})
    if head_only or length == 0:
        await send({"type": "http.response.body", "body": b""})
        return
    await _stream_body(receive, send, fd, first, length)


async def _stream_body(receive: Receive, send: Send, fd: int, first: int, length: int) -> None:
    """Send ``length`` bytes from offset ``first``, reading the next chunk while the current one is sent.

    The server's ``send`` only returns once its write buffer has drained below its high-water mark, so at
    most about two chunks are in memory.  A disconnect stops the loop instead of reading the rest of the
    file for nobody.
    """
    end = first + length

    def read(offset: int) -> bytes:
        data = os.pread(fd, min(CHUNK_SIZE, end - offset), offset)
        if not data:
            raise OSError(f"file shrank while being served: no data at offset {offset} of {end}")
        return data

    async with anyio.create_task_group() as tasks:

        async def watch_disconnect() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    tasks.cancel_scope.cancel()
                    return

        tasks.start_soon(watch_disconnect)
        offset = first
        chunk = await anyio.to_thread.run_sync(read, offset)
        while True:
            offset += len(chunk)
            if offset >= end:
                await send({"type": "http.response.body", "body": chunk, "more_body": False})
                break
            chunk = await _send_while_reading(send, chunk, read, offset)
        tasks.cancel_scope.cancel()


async def _send_while_reading(send: Send, chunk: bytes, read: Callable[[int], bytes], offset: int) -> bytes:
    """Send ``chunk`` (more to come) while a worker thread reads the next one at ``offset``."""
    upcoming: list[bytes] = []

    async def prefetch() -> None:
        upcoming.append(await anyio.to_thread.run_sync(read, offset))

    async with anyio.create_task_group() as pair:
        pair.start_soon(prefetch)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    return upcoming[0]
