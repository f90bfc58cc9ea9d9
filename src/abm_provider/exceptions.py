"""The exceptions of the ABM provider: a failed API or download call, and a local disk that refused a write.

Every failure a DAG author can meet talking to the service (an error answer, a dropped connection
after all retries, a body that is not what the API promises) becomes an :class:`AbmApiError`, so an
operator needs one ``except`` clause and can branch on ``http_status`` (``409`` for an export job
that already exists, ``403`` for an expired download link) instead of parsing text. It subclasses
``AirflowException`` so Airflow treats it as an ordinary task failure (retried per the task's
``retries``), and its text carries everything support needs: what was called, what the service said,
which field it objected to, and the request id.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from typing import Any

from abm_provider.compat import AirflowException, AirflowFailException

#: Field violations spelled out in the message; a 1000-account request can carry one per account.
_SHOWN_VIOLATIONS = 5


class AbmApiError(AirflowException):
    """A call to the ABM API (or to a download link) that failed for good.

    :param method: HTTP method of the failed call (``GET``, ``POST``).
    :param path: path of the call without the base URL and without a query string (download links
        keep only their path, because their query carries a signature).
    :param http_status: HTTP status of the last answer; ``None`` when no answer arrived (connection
        refused, reset or timed out) or the answer could not be read.
    :param status: the error body's ``error.status`` (``INVALID_ARGUMENT``, ``NOT_FOUND``...) when the
        body had one.
    :param message: the service's human-readable message, or our description of what went wrong.
    :param field_violations: ``[{"field": ..., "description": ...}]`` from the error body's details.
    :param request_id: the ``x-request-id`` answer header, for a support ticket.
    :param attempts: how many requests were made before giving up.
    :param outcome_unknown: ``True`` when a request that changes state may have taken effect although
        it failed (a 5xx or a lost connection after the request was sent), so a caller must look
        before it creates again.
    :param transient: ``True`` when trying again later may succeed (429, 423, 5xx, lost connection);
        the hook has already retried such errors within its budget before raising.
    :param retry_after: seconds the service asked to wait (``Retry-After``), when it said.
    :param kind: what went wrong, for code that branches on it: ``"answer"`` (an HTTP error answer),
        ``"connect"`` (could not connect), ``"lost"`` (connection lost after sending), ``"timeout"``
        (a deadline passed), ``"tls"``, ``"redirect"`` (a redirect not followed, a loop, too many
        hops), ``"unsafe_url"`` (a URL that breaks the URL rules), ``"too_large"``, ``"malformed"``
        (not the answer the API documents, or nested too deep), ``"paging"`` (a listing that would
        not end).
    """

    def __init__(
        self,
        *,
        method: str,
        path: str,
        http_status: int | None,
        status: str | None,
        message: str,
        field_violations: list[dict[str, str]] | None = None,
        request_id: str | None = None,
        attempts: int = 1,
        outcome_unknown: bool = False,
        transient: bool = False,
        retry_after: float | None = None,
        kind: str | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.http_status = http_status
        self.status = status
        self.message = message
        self.field_violations = list(field_violations or [])
        self.request_id = request_id
        self.attempts = attempts
        self.outcome_unknown = outcome_unknown
        self.transient = transient
        self.retry_after = retry_after
        self.kind = kind or ("answer" if http_status is not None else "lost")
        super().__init__(self._render())

    def _render(self) -> str:
        """``POST /x failed: 400 FAILED_PRECONDITION: why (f: bad) after 2 attempts [request id r]``."""
        code = " ".join(str(p) for p in (self.http_status, self.status) if p is not None)
        text = f"{self.method} {self.path} failed: "
        text += f"{code}: {self.message}" if code else self.message
        if self.field_violations:
            shown = self.field_violations[:_SHOWN_VIOLATIONS]
            fields = "; ".join(f"{v.get('field') or '?'}: {v.get('description') or 'invalid'}" for v in shown)
            hidden = len(self.field_violations) - len(shown)
            if hidden:
                fields += f"; and {hidden} more in .field_violations"
            text += f" ({fields})"
        if self.attempts > 1:
            text += f" after {self.attempts} attempts"
        if self.request_id:
            text += f" [request id {self.request_id}]"
        return text

    def __str__(self) -> str:
        return self._render()

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only __init__ arguments do not survive the default Exception pickling (which replays
        # ``args``); a task's exception is pickled when it crosses to the supervisor or a deepcopy.
        return (_rebuild, (self.__dict__.copy(), type(self)))


class UnexpectedBody(AbmApiError, AirflowFailException):
    """A successful answer whose body is not what was asked for: a web page or a JSON error where a
    download link should give the file (a proxy's sign-in page, a storage error sent with 200).

    An :class:`AbmApiError` (``kind="malformed"``) like every failed call, and an
    ``AirflowFailException``: the same link gives the same page, so Airflow does not retry it. The
    message names the ``Content-Type`` and shows how the body begins, redacted.
    """


def _rebuild(state: dict[str, Any], cls: type[AbmApiError] = AbmApiError) -> AbmApiError:
    keys = (
        "method",
        "path",
        "http_status",
        "status",
        "message",
        "field_violations",
        "request_id",
        "attempts",
        "outcome_unknown",
        "transient",
        "retry_after",
        "kind",
    )
    err = cls(**{k: state[k] for k in keys if k in state})
    err.__dict__.update(state)
    return err


#: Local file errors no retry can fix: a full disk, a quota, a read-only mount, a missing permission.
FINAL_LOCAL_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EFBIG")
    if hasattr(errno, name)
)


class SyncAlreadyRunning(AirflowException):
    """Another sync of the list holds its lock, so this run read, sent and recorded nothing.

    A plain ``AirflowException``, not ``AirflowFailException``: the other sync ends, so a later try
    succeeds, and the task's ``retries`` apply.
    """


class PlanRowsMissing(AirflowException):
    """The state database gave back fewer rows of a run's plan than the run's row says it holds.

    Raised before any of those rows is sent or recorded, so nothing is marked sent that was not: the
    run's progress stops at the last group recorded. A plain ``AirflowException``: a retry reads the
    plan again and resumes from there (a database that hid committed rows from one connection shows
    them to the next).
    """


class SyncGuardTripped(AirflowFailException):
    """A list sync's guard stopped the run before anything was sent; the plan is kept for a look.

    The plan would remove more recorded members than ``max_removals`` allows, or a run that removes
    met a source with no rows. Both usually mean a broken upstream job, not a wish to empty the list,
    so the task fails without retries: a retry would read the same source. ``guard`` names the
    argument that stopped it (``"max_removals"`` or ``"allow_empty_source"``); the message gives the
    figures and how to let the run through.
    """

    def __init__(self, message: str, *, guard: str = "", run_id: str = "") -> None:
        super().__init__(message)
        self.guard = guard
        self.run_id = run_id


class LocalStorageError(AirflowFailException):
    """A local file (the archive, the state dir, a rejects file) could not be written: the disk is
    full, over quota, read-only or not writable by the task.

    It fails the task for good: every retry would meet the same disk, and it is not a network failure
    either, which is what an error raised inside a download's read loop used to be taken for. The
    message names the path, what was being done and the cause; ``path``, ``action`` and ``errno`` carry
    them for code.
    """

    def __init__(self, path: str, action: str, cause: OSError) -> None:
        self.path = str(path)
        self.action = action
        self.errno = cause.errno
        name = errno.errorcode.get(cause.errno or 0, "")
        reason = cause.strerror or str(cause)
        super().__init__(
            f"Cannot {action} {self.path}: {reason}{f' ({name})' if name else ''}. This is the local "
            "disk, not the service: free space or fix the permissions there, or point [abm] state_dir "
            "(or the task's archive/rejects_path) at another volume, then clear the task."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-free rebuild: a task's exception is pickled when it crosses to the supervisor.
        return (_rebuild_local, (self.path, self.action, self.errno))


def _rebuild_local(path: str, action: str, code: int | None) -> LocalStorageError:
    return LocalStorageError(path, action, OSError(code or 0, os.strerror(code or 0)))


@contextlib.contextmanager
def local_io(path: object, action: str) -> Iterator[None]:
    """Raise a local file error no retry can fix (:data:`FINAL_LOCAL_ERRNOS`) as :class:`LocalStorageError`.

    Other ``OSError``s pass unchanged: an ``EIO`` or a vanished mount may well pass on the next try.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno in FINAL_LOCAL_ERRNOS and not isinstance(exc, ConnectionError):
            raise LocalStorageError(str(path), action, exc) from exc
        raise


#: Characters of what arrived that a :class:`NotAnExport` message shows.
EXCERPT_CHARS = 300


class NotAnExport(AirflowFailException):
    """What arrived where an export CSV should be is something else: an HTML error page, a JSON body,
    a first line that is not a header of column names.

    It fails the task for good: the same link or file gives the same body again. The message shows a
    bounded excerpt of what arrived (the caller redacts it first: an error page may echo a signed
    link) and the ``Content-Type`` when it is known.
    """

    def __init__(self, what: str, why: str, *, excerpt: str, content_type: str | None = None) -> None:
        self.what = what
        self.why = why
        self.excerpt = excerpt[:EXCERPT_CHARS]
        self.content_type = content_type
        kind = f"Content-Type {content_type}" if content_type else "no Content-Type known"
        super().__init__(
            f"{what} is not the export CSV: {why} ({kind}). It begins: {self.excerpt!r}. "
            "Check the link and the export; retrying gets the same body."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_not_export, (self.what, self.why, self.excerpt, self.content_type))


def _rebuild_not_export(what: str, why: str, excerpt: str, content_type: str | None) -> NotAnExport:
    return NotAnExport(what, why, excerpt=excerpt, content_type=content_type)
