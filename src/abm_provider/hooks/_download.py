"""Streaming a download link into a file object: URL rules on every hop, resume after drops.

Redirects are followed here, not by ``requests``, so each hop meets the URL rules. A dropped
connection resumes with ``Range`` and ``If-Match`` (a changed file is never stitched onto the old
one's start). Its driver is apart from the hooks' because an attempt here continues a byte range
rather than repeating a request; it runs on the same policy (:class:`~._pipeline.Attempts` counts
only the failures since the last progress).
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO
from urllib.parse import urljoin, urlsplit

import requests
import tenacity

from abm_provider.common.arguments import check_whole
from abm_provider.common.byte_count import ByteCountMismatch, check_byte_count
from abm_provider.common.urls import UnsafeUrlError, check_url, safe_url, url_origin
from abm_provider.exceptions import EXCERPT_CHARS, AbmApiError, UnexpectedBody
from abm_provider.hooks._pipeline import USER_AGENT, Answer, Attempts, Call, ErrorBody, Pipeline, Prepared
from abm_provider.hooks._transports import RequestsTransport
from abm_provider.hooks.results import DownloadResult

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Media types no export file is served as: an HTML page, a JSON or XML (error) body.
_NOT_FILE_TYPES = frozenset({"text/html", "application/json", "text/json", "application/xml", "text/xml"})
WRITE_SIZE = 256 << 10


class Download:
    """One download of ``uri`` into ``fileobj`` with an :class:`~.abm.AbmHook`'s pipeline and transport."""

    def __init__(self, hook: Any, uri: str, fileobj: BinaryIO, chunk_size: int, on_progress: Any) -> None:
        check_whole(chunk_size, "chunk_size", 1)
        self.pipeline: Pipeline = hook.pipeline
        self.transport: RequestsTransport = hook.transport
        self.log, self.limits = hook.log, self.pipeline.limits
        self.uri, self.fileobj, self.chunk_size, self.on_progress = uri, fileobj, chunk_size, on_progress
        self.call = Call("GET", (urlsplit(uri).path or "/") if isinstance(uri, str) else repr(uri))
        self.written = self.resumed = 0
        self.total: int | None = None
        self.etag: str | None = None
        self.started = False
        self.digest = hashlib.sha256()

    def run(self) -> DownloadResult:
        self.pipeline.redact.learn(self.uri if isinstance(self.uri, str) else "")
        self._check(self.uri, "download_uri")
        self.log.info("Downloading %s", safe_url(self.uri))
        attempts = Attempts(log=self.log, progress=lambda: self.written)
        for attempt in tenacity.Retrying(**self.pipeline.retrying(self.log, attempts)):
            with attempt:
                self._attempt()
        return DownloadResult(self.written, self.digest.hexdigest(), self.etag, self.total, self.resumed)

    def _check(self, url: str, what: str) -> str:
        try:
            return check_url(url, what)
        except UnsafeUrlError as err:
            raise self.pipeline.failure(self.call, "unsafe_url", str(err), sent=False) from None

    def _prepared(self, url: str, ends: float) -> Prepared:
        headers = {"User-Agent": USER_AGENT, "Accept": "*/*", "Accept-Encoding": "identity"}
        if url_origin(url) == self.pipeline.settings.origin:
            headers.update(self.pipeline.settings.auth_header())
        if self.started:
            headers["Range"] = f"bytes={self.written}-"
            if self.etag:
                headers["If-Match"] = self.etag
        limit = f"download_timeout={self.limits.download_timeout:g} s"

        def fail(kind: str, text: str, sent: bool = True) -> AbmApiError:
            text = f"the attempt passed {limit} ({text})" if kind == "timeout" else text
            return self.pipeline.failure(self.call, kind, text, sent)

        timeout = max(min(self.limits.request_timeout, ends - time.monotonic()), 0.01)
        return Prepared(
            "GET", url, self.call.path, headers, None, timeout, 0, self.limits.max_error_bytes, fail
        )

    def _attempt(self) -> None:
        """One request (and its redirect hops) within ``download_timeout``."""
        if self.started:
            self.resumed += 1
            self.log.warning("Resuming download at byte %d of %s", self.written, self.total)
        ends = time.monotonic() + self.limits.download_timeout
        url, seen = self.uri, {self.uri}
        for _hop in range(self.limits.max_redirects + 1):
            prepared = self._prepared(url, ends)
            with self.transport.stream(prepared, total=max(ends - time.monotonic(), 0.01)) as response:
                location = response.headers.get("Location")
                if response.status_code not in _REDIRECTS or not location:
                    return self._body(response, prepared)
            url = self._check(urljoin(url, location), f"the download's redirect from {safe_url(url)} to")
            self.pipeline.redact.learn(url)
            if url in seen:
                raise self.pipeline.error(
                    self.call, "redirect", f"the download redirects in a loop ({safe_url(url)})"
                )
            seen.add(url)
        hops = f"the download redirected more than max_redirects={self.limits.max_redirects} times"
        raise self.pipeline.error(self.call, "redirect", hops)

    def _error(self, response: requests.Response) -> AbmApiError:
        """An error answer from the storage origin, its body read only up to ``max_error_bytes``."""
        status = response.status_code
        if status == 412:
            return self._changed()
        body = response.raw.read(self.limits.max_error_bytes + 1, decode_content=False) or b""
        try:
            self.pipeline.interpret(self.call, Answer(status, response.headers, body))
        except AbmApiError as err:
            if status == 403:
                err.message += " - the link has probably expired; read the execution again for a fresh one"
            return err
        raise AssertionError("an error status always raises")  # pragma: no cover

    def _check_media_type(self, response: requests.Response) -> None:
        """Refuse a web page or an API error body answered with 200 where the file should be.

        Why here: a proxy's login page or a storage error in JSON would otherwise be archived, hashed
        and handed to the load as if it were the export. The excerpt is read within ``max_error_bytes``
        and redacted (such pages echo the link they were asked for).
        """
        content_type = response.headers.get("Content-Type") or ""
        media = content_type.split(";")[0].strip().lower()
        if not (media in _NOT_FILE_TYPES or media.endswith(("+json", "+xml"))):
            return
        body = response.raw.read(min(self.limits.max_error_bytes, EXCERPT_CHARS), decode_content=False)
        excerpt = (body or b"").decode("utf-8", "replace")
        message = (
            f"the link answered {response.status_code} with Content-Type {content_type}, not the file; "
            f"the body begins: {excerpt!r}. Retrying gets the same page: check the link and the export"
        )
        raise self.pipeline.error(
            self.call, "malformed", message, response.status_code, response.headers, cls=UnexpectedBody
        )

    def _write(self, view: memoryview) -> None:
        # Writes of a few hundred KiB: on a VM whose memory the host reclaims, the page cache takes
        # 8 MiB writes several times slower (docs/performance.md, "Figures behind design choices").
        for start in range(0, len(view), WRITE_SIZE):
            self.fileobj.write(view[start : start + WRITE_SIZE])

    def _progress(self, count: int) -> None:
        self.written += count
        if self.on_progress is not None:
            self.on_progress(self.written, self.total)

    def _changed(self) -> AbmApiError:
        message = (
            f"the file changed after {self.written} bytes were written (ETag {self.etag}); "
            "the download must start again with an empty file"
        )
        return self.pipeline.error(
            self.call, "answer", message, 412, body=ErrorBody("FAILED_PRECONDITION", "", [])
        )

    def _body(self, response: requests.Response, prepared: Prepared) -> None:
        status, headers = response.status_code, response.headers
        if status == 416 and self.total is not None and self.written == self.total:
            return
        if status >= 300:
            raise self._error(response)
        if status == 206:
            start, total = _content_range(headers.get("Content-Range"))
            if start is None or start > self.written:
                got = headers.get("Content-Range")
                message = f"asked to resume at byte {self.written}, got Content-Range {got!r}"
                raise self.pipeline.error(self.call, "malformed", message, status, headers)
            skip = self.written - start
        else:
            total, skip = self.pipeline.content_length(self.call, status, headers), self.written
        if not self.started:
            self._check_media_type(response)
        etag = headers.get("ETag")
        changed = self.etag and etag and etag != self.etag
        if self.started and (changed or (None not in (self.total, total) and total != self.total)):
            raise self._changed()
        self.started = True
        self.etag = self.etag or etag
        self.total = self.total if self.total is not None else total
        raw = response.raw
        # The origin ignored Range: drop what is already written.
        while skip and (dropped := raw.read(min(skip, self.chunk_size), decode_content=False)):
            skip -= len(dropped)
        # http.client's own readinto fills our buffers straight from the socket (no copy, no
        # allocation); urllib3's public one reads into a new bytes object first.
        readinto = getattr(getattr(raw, "_fp", None), "readinto", None) or raw.readinto
        try:
            pump(readinto, (self.digest.update, self._write), self.chunk_size, self._progress)
        finally:  # more bytes than announced is a malformed answer, whatever else ended the body
            self._check_count(prepared, status, headers, complete=False)
        self._check_count(prepared, status, headers)

    def _check_count(
        self, prepared: Prepared, status: int, headers: Mapping[str, str], complete: bool = True
    ) -> None:
        """The bytes so far against the announced size: fewer once the body ended is a lost connection
        (the download resumes), more is a malformed answer (no retry can help)."""
        try:
            check_byte_count(
                self.written, self.total, what="the download", basis="the server announced", complete=complete
            )
        except ByteCountMismatch as err:
            if err.short:
                raise prepared.fail("lost", str(err)) from None
            raise self.pipeline.error(self.call, "malformed", str(err), status, headers) from None


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes 100-199/1000`` -> ``(100, 1000)``; the total may be ``*`` (unknown)."""
    if not value or not value.startswith("bytes "):
        return None, None
    span, _, total = value[6:].partition("/")
    start = span.partition("-")[0]
    return (int(start) if start.isdigit() else None), (int(total) if total.isdigit() else None)


def pump(
    readinto: Callable[[memoryview], int | None],
    stages: tuple[Callable[[memoryview], object], ...],
    chunk_size: int,
    done: Callable[[int], None],
    buffers: int = 3,
) -> None:
    """Read into ``buffers`` reused buffers; each filled one goes through ``stages`` in order.

    Each stage (hash, write) runs on a thread of its own, so three chunks are read, hashed and written
    at once (both release the GIL); memory is ``buffers * chunk_size``. ``done(n)`` is called here for
    each chunk every stage finished, so after a raise the caller knows where a resume starts.
    """
    views = [memoryview(bytearray(chunk_size)) for _ in range(buffers)]
    inboxes: list[queue.SimpleQueue[tuple[int, int] | None]] = [queue.SimpleQueue() for _ in stages]
    free: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    errors: list[BaseException] = []

    def work(
        stage: Callable[[memoryview], object], inbox: queue.SimpleQueue, outbox: queue.SimpleQueue
    ) -> None:
        while (item := inbox.get()) is not None:
            index, length = item
            if length and not errors:
                try:
                    stage(views[index][:length])
                except BaseException as exc:  # raised on the reading thread
                    errors.append(exc)
            outbox.put((index, 0 if errors else length))  # the buffer always comes back
        outbox.put(None)

    outboxes = [*inboxes[1:], free]
    threads = [
        threading.Thread(target=work, args=(stage, inboxes[i], outboxes[i]), daemon=True, name="abm-download")
        for i, stage in enumerate(stages)
    ]
    for thread in threads:
        thread.start()
    for index in range(buffers):
        free.put((index, 0))
    try:
        while not errors:
            item = free.get()
            assert item is not None
            index, length = item
            if length:
                done(length)
            filled, view = 0, views[index]
            while filled < chunk_size and (got := readinto(view[filled:])):
                filled += got
            inboxes[0].put((index, filled))
            if not filled:
                break
    finally:
        inboxes[0].put(None)
        for thread in threads:
            thread.join()
        while (item := free.get()) is not None:
            if item[1]:
                done(item[1])
    if errors:
        raise errors[0]
