"""The one exception the ABM provider raises for a failed API or download call.

Every failure a DAG author can meet talking to the service (an error answer, a dropped connection
after all retries, a body that is not what the API promises) becomes an :class:`AbmApiError`, so an
operator needs one ``except`` clause and can branch on ``http_status`` (``409`` for an export job
that already exists, ``403`` for an expired download link) instead of parsing text. It subclasses
``AirflowException`` so Airflow treats it as an ordinary task failure (retried per the task's
``retries``), and its text carries everything support needs: what was called, what the service said,
which field it objected to, and the request id.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowException

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
        return (_rebuild, (self.__dict__.copy(),))


def _rebuild(state: dict[str, Any]) -> AbmApiError:
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
    err = AbmApiError(**{k: state[k] for k in keys if k in state})
    err.__dict__.update(state)
    return err
