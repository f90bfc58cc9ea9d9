"""Streaming a download link into a file object, resuming after dropped connections.

A pre-signed link can be hundreds of megabytes, so the body is written chunk by chunk (memory is a
few chunks) and hashed on the way; the writes run on a second thread (:mod:`._writer`). When the
connection drops, the next attempt asks for the rest with ``Range`` and ``If-Match`` so a changed
file is never stitched onto the old one's start; progress resets the failure count, so only
repeated failures without progress end the download.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, NoReturn
from urllib.parse import urlsplit

import requests
import tenacity

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._policy import (
    REQUEST_ID_HEADER,
    AbmSettings,
    BackoffWait,
    Redactor,
    RetryBudget,
    api_error,
    check_transport,
    loggable_url,
    should_retry,
    transport_error,
    url_origin,
)
from abm_provider.hooks._transport import innermost, request_was_sent, tls_error
from abm_provider.hooks._writer import OrderedWriter
from abm_provider.models import DownloadResult


@dataclass
class _State:
    """Progress of one download across its attempts."""

    written: int = 0
    total: int | None = None
    etag: str | None = None
    resumed: int = 0
    failures: int = 0
    started: bool = False

    def __post_init__(self) -> None:
        self.digest = hashlib.sha256()


class ResumableDownload:
    """One download with the hook's session (origin-bound auth), settings and retry budget."""

    def __init__(
        self,
        session: requests.Session,
        settings: AbmSettings,
        log: logging.Logger | Any,
        log_retry: Callable[[tenacity.RetryCallState], None],
    ) -> None:
        self.session = session
        self.settings = settings
        self.log = log
        self.log_retry = log_retry

    def run(
        self,
        download_uri: str,
        fileobj: BinaryIO,
        *,
        chunk_size: int = 8 << 20,
        on_progress: Callable[[int, int | None], None] | None = None,
    ) -> DownloadResult:
        """Stream ``download_uri`` into ``fileobj`` in ``chunk_size`` pieces, resuming after drops.

        Memory stays at a few chunks whatever the file size. After a dropped connection the transfer
        resumes with ``Range: bytes=<written>-`` and ``If-Match: <ETag>``; a failure that made
        progress does not use up an attempt, so a long file survives many drops. The byte count is
        checked against ``Content-Length``. A link on another origin than the API gets no
        ``Authorization`` header. Raises ``AbmApiError(http_status=403)`` when the link has
        expired (list the execution again for a fresh one) and ``http_status=412`` when the file
        changed between attempts (start again with an empty file).
        """
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive number of bytes, got {chunk_size!r}")
        if not isinstance(download_uri, str) or not download_uri:
            raise ValueError(f"download_uri must be a URL, got {download_uri!r}")
        check_transport(download_uri, what="download_uri")
        settings = self.settings
        budget = settings.budget
        state = _State()
        path = urlsplit(download_uri).path or "/"

        def stop(retry_state: tenacity.RetryCallState) -> bool:
            return state.failures >= budget.max_attempts

        retrying = tenacity.Retrying(
            stop=stop,
            wait=BackoffWait(budget.max_wait, attempt_of=lambda _: max(state.failures, 1)),
            retry=tenacity.retry_if_exception(
                lambda err: should_retry(err, budget=budget, may_repeat_uncertain=True)
            ),
            before_sleep=self.log_retry,
            reraise=True,
        )
        self.log.info("Downloading %s", loggable_url(download_uri))
        for attempt in retrying:
            with attempt:
                before = state.written
                try:
                    self._once(download_uri, path, fileobj, chunk_size, on_progress, state, budget)
                except AbmApiError as err:
                    state.failures = 1 if state.written > before else state.failures + 1
                    err.attempts = attempt.retry_state.attempt_number
                    raise
        return DownloadResult(
            bytes=state.written,
            sha256=state.digest.hexdigest(),
            etag=state.etag,
            content_length=state.total,
            resumed=state.resumed,
        )

    def _once(
        self,
        uri: str,
        path: str,
        fileobj: BinaryIO,
        chunk_size: int,
        on_progress: Callable[[int, int | None], None] | None,
        state: _State,
        budget: RetryBudget,
    ) -> None:
        settings = self.settings
        redact = settings.redactor()
        same_origin = url_origin(uri) == settings.origin
        headers = {"Accept-Encoding": "identity", "Accept": "*/*"}
        if state.started:
            headers["Range"] = f"bytes={state.written}-"
            if state.etag:
                headers["If-Match"] = state.etag
            state.resumed += 1
            self.log.warning(
                "Resuming download of %s at byte %d of %s", loggable_url(uri), state.written, state.total
            )
        try:
            response = self.session.get(
                uri,
                headers=headers,
                stream=True,
                timeout=(budget.timeout, budget.timeout),
                # per request: requests lets REQUESTS_CA_BUNDLE override a session's verify
                verify=settings.verify,
                allow_redirects=not same_origin,
            )
        except requests.exceptions.SSLError as exc:
            raise tls_error("GET", path, exc, redact, settings.conn_id) from None
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise transport_error(
                method="GET",
                path=path,
                exc=innermost(exc),
                sent=request_was_sent(exc),
                idempotent=True,
                redact=redact,
            ) from None
        with response:
            self._stream_body(response, uri, path, fileobj, chunk_size, on_progress, state, redact)

    def _stream_body(
        self,
        response: requests.Response,
        uri: str,
        path: str,
        fileobj: BinaryIO,
        chunk_size: int,
        on_progress: Callable[[int, int | None], None] | None,
        state: _State,
        redact: Redactor,
    ) -> None:
        request_id = response.headers.get(REQUEST_ID_HEADER) or response.headers.get("x-amz-request-id")
        status = response.status_code
        if status == 416 and state.total is not None and state.written == state.total:
            return
        if status >= 300:
            if status == 412:
                _file_changed(path, state, request_id)
            err = api_error(
                method="GET",
                path=path,
                http_status=status,
                body=response.content[:4096],
                content_type=response.headers.get("Content-Type"),
                request_id=request_id,
                retry_after=response.headers.get("Retry-After"),
                idempotent=True,
                redact=redact,
            )
            if status == 403:
                err.message += (
                    " - the download link has probably expired; read the execution again for a fresh "
                    "downloadUri"
                )
            raise err
        etag = response.headers.get("ETag")
        skip = 0
        if status == 206:
            start, total = _content_range(response.headers.get("Content-Range"))
            if start is None or start > state.written:
                raise AbmApiError(
                    method="GET",
                    path=path,
                    http_status=206,
                    status=None,
                    message=f"asked to resume at byte {state.written}, the storage answered "
                    f"Content-Range {response.headers.get('Content-Range')!r}",
                    request_id=request_id,
                )
            skip = state.written - start
        else:
            total = _int_header(response.headers.get("Content-Length"))
            skip = state.written  # the origin ignored Range: drop what is already written
        if state.started and state.etag and etag and etag != state.etag:
            _file_changed(path, state, request_id)
        if state.total is not None and total is not None and total != state.total:
            _file_changed(path, state, request_id)
        state.started = True
        state.etag = state.etag or etag
        state.total = state.total if state.total is not None else total
        chunks = response.iter_content(chunk_size)
        with OrderedWriter(fileobj) as out:
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                except requests.exceptions.RequestException as exc:
                    raise transport_error(
                        method="GET",
                        path=path,
                        exc=_DroppedAfter(state.written, state.total, innermost(exc)),
                        sent=True,
                        idempotent=True,
                        redact=redact,
                    ) from None
                if skip:
                    dropped = min(skip, len(chunk))
                    chunk = chunk[dropped:]
                    skip -= dropped
                    if not chunk:
                        continue
                out.write(chunk)
                state.digest.update(chunk)
                state.written += len(chunk)
                if on_progress is not None:
                    on_progress(state.written, state.total)
        if state.total is not None and state.written != state.total:
            if state.written > state.total:
                raise AbmApiError(
                    method="GET",
                    path=path,
                    http_status=status,
                    status=None,
                    message=f"received {state.written} bytes, more than the announced {state.total}",
                    request_id=request_id,
                )
            raise transport_error(
                method="GET",
                path=path,
                exc=_DroppedAfter(state.written, state.total, None),
                sent=True,
                idempotent=True,
                redact=redact,
            )


class _DroppedAfter(Exception):
    """Describes where a body ended early, for the error text."""

    self_describing = True

    def __init__(self, written: int, total: int | None, cause: BaseException | None) -> None:
        detail = f"body ended after {written} of {total if total is not None else 'unknown'} bytes"
        super().__init__(f"{detail} ({type(cause).__name__}: {cause})" if cause else detail)


def _file_changed(path: str, state: _State, request_id: str | None) -> NoReturn:
    raise AbmApiError(
        method="GET",
        path=path,
        http_status=412,
        status="FAILED_PRECONDITION",
        message=(
            f"the file changed after {state.written} bytes were written (ETag {state.etag}); "
            "the download must start again with an empty file"
        ),
        request_id=request_id,
    )


def _int_header(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """``bytes 100-199/1000`` -> ``(100, 1000)``; the total may be ``*`` (unknown)."""
    if not value or not value.startswith("bytes "):
        return None, None
    span, _, total = value[6:].partition("/")
    start, _, _ = span.partition("-")
    try:
        first = int(start)
    except ValueError:
        return None, None
    return first, _int_header(total) if total != "*" else None
