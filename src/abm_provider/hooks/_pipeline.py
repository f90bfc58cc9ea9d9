"""The request pipeline both hooks share; only the transport differs (``requests`` or ``aiohttp``).

A :class:`Call` describes a request, including what to do when its outcome is unknown;
:class:`Pipeline` prepares it, reads what came back (:meth:`Pipeline.interpret`) and holds the one
retry policy, which :class:`Attempts` applies to one call. No I/O here: the hooks' drivers send, and
list when a create must look for its own effect. A failed attempt is *refused* (429, 423, 408, 425,
never connected: safe to repeat), *uncertain* (a 5xx but 501/505, lost or cut off after sending, an
unreadable 2xx: the call's ``on_unknown`` decides) or *final*.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import quote

import tenacity

from abm_provider.common.urls import Redactor, encode_query
from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._responses import (
    ErrorBody,
    clip,
    decode,
    parse_error_body,
    parse_object,
    parse_retry_after,
)
from abm_provider.hooks.settings import AbmSettings, Limits

REQUEST_ID_HEADERS = ("x-request-id", "x-amz-request-id")
USER_AGENT = "airflow-provider-abm"
#: First back-off wait in seconds; doubles per attempt up to ``retry_max_wait``, plus up to ``JITTER``.
INITIAL_WAIT = 0.5
JITTER = 0.5
#: Statuses whose request the service refused without acting on it: always safe to repeat.
REFUSED_STATUSES = frozenset({408, 423, 425, 429})
#: 5xx statuses that say the server will never do this request: not worth repeating.
FINAL_5XX = frozenset({501, 505})

FailureKind = Literal["refused", "uncertain", "final"]


def failure_kind(http_status: int | None, *, sent: bool = True) -> FailureKind:
    """Classify a failed attempt (see the module docstring); ``http_status`` ``None`` = no answer."""
    if http_status is None:
        return "uncertain" if sent else "refused"
    if http_status in REFUSED_STATUSES:
        return "refused"
    if 500 <= http_status <= 599 and http_status not in FINAL_5XX:
        return "uncertain"
    return "final"


def api_path(*segments: str) -> str:
    """A path from segments, each percent-encoded (user values are checked by ``path_segment`` first)."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


@dataclass(frozen=True)
class Reconcile:
    """How a create whose outcome is unknown finds out whether it took effect: it reads ``listing``
    (items under ``key``) and takes the items ``made`` accepts, those it would have made (its name,
    not among the ones that existed before it). One: that is the answer; none: it is sent again;
    more: the hook cannot tell which is its own and raises.
    """

    listing: Call
    key: str
    made: Callable[[Mapping[str, Any]], bool]


#: What a call does after an attempt whose outcome is unknown: ``"repeat"`` it (reads, and writes
#: that may run twice), ``"raise"`` (the caller settles it), ``"resend"`` (the service refuses a
#: duplicate, so a conflict that follows is read as "an earlier attempt may have made it"), or
#: :class:`Reconcile` (look for its effect first).
OnUnknown = Literal["repeat", "raise", "resend"] | Reconcile


@dataclass(frozen=True)
class Call:
    """One API request, described: a create says in ``on_unknown`` how not to repeat it blindly."""

    method: str
    path: str
    query: Mapping[str, Any] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    on_unknown: OnUnknown = "repeat"
    #: POSIX time the caller must be done by (a sensor's timeout); bounds each attempt too.
    deadline: float | None = None

    def next_page(self, token: str) -> Call:
        return replace(self, query={**self.query, "pageToken": token})


@dataclass(frozen=True)
class Prepared:
    """A request ready for a transport, with the bounds the transport enforces."""

    method: str
    url: str
    path: str
    headers: dict[str, str]
    body: bytes | None
    timeout: float
    max_body: int
    max_error: int
    fail: Callable[..., AbmApiError]

    def request(self) -> dict[str, Any]:
        """What either HTTP client needs to send it; redirects are never followed by the client."""
        return {
            "method": self.method,
            "url": self.url,
            "headers": self.headers,
            "data": self.body,
            "allow_redirects": False,
        }


@dataclass(frozen=True)
class Answer:
    """What a transport got: status, headers and at most the bounded number of body bytes."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Pipeline:
    """Prepare, interpret and retry for one connection; shared by both hooks and the download."""

    def __init__(self, settings: AbmSettings) -> None:
        self.settings = settings
        self.limits: Limits = settings.limits
        self.redact: Redactor = settings.redactor()
        self._auth = settings.auth_header()

    # -- out --------------------------------------------------------------------------------------

    def prepare(self, call: Call) -> Prepared:
        query = encode_query(call.query)
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **self._auth}
        body = None
        if call.body is not None:
            body = json.dumps(call.body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        timeout = self.limits.request_timeout
        if call.deadline is not None:
            timeout = max(min(timeout, call.deadline - time.time()), 0.01)
        return Prepared(
            method=call.method,
            url=self.settings.base_url + call.path + (f"?{query}" if query else ""),
            path=call.path,
            headers=headers,
            body=body,
            timeout=timeout,
            max_body=self.limits.max_response_bytes,
            max_error=self.limits.max_error_bytes,
            fail=lambda kind, text, sent=True: self.failure(call, kind, text, sent),
        )

    # -- errors -----------------------------------------------------------------------------------

    def error(
        self,
        call: Call,
        kind: str,
        message: str,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        classified: FailureKind = "final",
        body: ErrorBody | None = None,
        cls: type[AbmApiError] = AbmApiError,
    ) -> AbmApiError:
        """The one way an :class:`AbmApiError` (or a subclass, ``cls``) is made: every text field
        passes the redactor."""
        redact, headers = self.redact, headers or {}
        request_id = next((headers[h] for h in REQUEST_ID_HEADERS if headers.get(h)), None)
        return cls(
            method=call.method,
            path=redact(call.path),
            http_status=status,
            status=clip(redact(body.status)) if body and body.status else None,
            message=clip(redact(message)),
            field_violations=[{k: clip(redact(v)) for k, v in f.items()} for f in body.field_violations]
            if body
            else [],
            request_id=clip(redact(request_id), 100) if request_id else None,
            outcome_unknown=classified == "uncertain" and call.on_unknown != "repeat",
            transient=classified != "final",
            retry_after=parse_retry_after(headers.get("Retry-After")) if status is not None else None,
            kind=kind,
        )

    def failure(self, call: Call, kind: str, text: str, sent: bool = True) -> AbmApiError:
        """A request that got no usable answer: could not connect, lost, timed out, TLS, unsafe URL."""
        what = {
            "connect": "could not connect",
            "lost": "no answer (connection lost after the request was sent)",
            "timeout": "no complete answer within the deadline",
        }.get(kind)
        classified: FailureKind = "final" if kind in ("tls", "unsafe_url", "too_large") else "uncertain"
        if not sent and classified == "uncertain":
            classified = "refused"
        return self.error(call, kind, f"{what}: {text}" if what else text, classified=classified)

    # -- in ---------------------------------------------------------------------------------------

    def interpret(self, call: Call, answer: Answer) -> dict[str, Any]:
        """The answer's JSON object, or the :class:`AbmApiError` it amounts to."""
        status, headers = answer.status, answer.headers
        limit = self.limits.max_response_bytes if status < 300 else self.limits.max_error_bytes
        declared = self.content_length(call, status, headers)
        if declared is not None and len(answer.body) < min(declared, limit + 1):
            raise self.failure(call, "lost", f"the body ended after {len(answer.body)} of {declared} bytes")
        if 300 <= status < 400:
            message = f"the API answered {status} (a redirect), which is not followed; check the base URL"
            raise self.error(call, "redirect", message, status, headers)
        if status >= 400:
            try:
                raw = decode(answer.body, answer.headers, limit, cut=True)
            except ValueError as why:
                raw = str(why).encode()
            parsed = parse_error_body(status, raw, self.limits.max_json_depth)
            message = parsed.message + self._hint(status, parsed.status)
            raise self.error(call, "answer", message, status, headers, failure_kind(status), parsed)
        try:
            return parse_object(decode(answer.body, answer.headers, limit), self.limits.max_json_depth)
        except ValueError as why:
            big = "bytes" in str(why)
            message = f"the answer is not the JSON object the API documents ({why})"
            kind, classified = ("too_large", "final") if big else ("malformed", "uncertain")
            raise self.error(call, kind, message, status, headers, classified) from None  # type: ignore[arg-type]

    def content_length(self, call: Call, status: int, headers: Mapping[str, str]) -> int | None:
        """The announced body size; one that is not a byte count makes the answer unreadable."""
        declared = headers.get("Content-Length")
        if declared is not None and not declared.strip().isdigit():
            message = f"Content-Length {declared[:40]!r} is not a byte count"
            raise self.error(call, "malformed", message, status, headers, "uncertain")
        return int(declared) if declared is not None else None

    def _hint(self, status: int, error_status: str | None) -> str:
        """The one thing a DAG author can do about errors whose cause is the connection."""
        name = self.settings.name
        if status == 401:
            return f" - check the API key (password) of {name}"
        if status == 403 and error_status == "PERMISSION_DENIED":
            return f" - the key of {name} is valid but not allowed to do this"
        return ""

    # -- retrying ---------------------------------------------------------------------------------

    def may_retry(self, err: BaseException, attempt: int, on_unknown: OnUnknown = "repeat") -> bool:
        """Whether another attempt may follow ``err`` (the ``attempt``-th); records the count on it.

        A ``Retry-After`` longer than ``retry_max_wait`` ends the call at once, with the wait named in
        the message, rather than retrying early and burning attempts on more 429s.
        """
        if not isinstance(err, AbmApiError):
            return False
        err.attempts = attempt
        if not err.transient or attempt >= self.limits.max_attempts:
            return False
        if err.outcome_unknown and on_unknown == "raise":
            return False
        if err.retry_after is not None and err.retry_after > self.limits.retry_max_wait:
            err.message += (
                f" (the service asked to retry after {err.retry_after:.0f} s, longer than retry_max_wait="
                f"{self.limits.retry_max_wait:g} s; raise retry_max_wait to wait that long)"
            )
            return False
        return True

    def backoff(self, failures: int, err: BaseException | None) -> float:
        """Capped exponential back-off with jitter, never shorter than the server's ``Retry-After``."""
        wait = min(
            INITIAL_WAIT * 2 ** min(max(failures, 1) - 1, 60) + random.uniform(0, JITTER),
            self.limits.retry_max_wait,
        )
        retry_after = getattr(err, "retry_after", None)
        return max(wait, float(retry_after)) if retry_after is not None else wait

    def retrying(self, log: logging.Logger | Any, attempts: Attempts | None = None) -> dict[str, Any]:
        """Keyword arguments for ``tenacity.Retrying`` or ``AsyncRetrying``: the one retry policy.

        ``attempts`` is the call's own record (what it does after an unknown outcome, how it counts
        failures); the retry test records each failure in it, so the wait and the log that follow see
        the same count.
        """
        record = attempts if attempts is not None else Attempts()

        def retry(state: tenacity.RetryCallState) -> bool:
            err = state.outcome.exception() if state.outcome is not None else None
            if err is None:
                return False
            return self.may_retry(err, record.failed(err), record.on_unknown)

        def wait(state: tenacity.RetryCallState) -> float:
            err = state.outcome.exception() if state.outcome is not None else None
            return record.settle(self.backoff(record.failures, err), self.limits)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            err = state.outcome.exception() if state.outcome is not None else None
            count = f"{getattr(err, 'attempts', state.attempt_number)}/{self.limits.max_attempts}"
            then = "looking for its effect" if record.look is not None else "retrying"
            log.warning("%s - attempt %s, %s in %.1f s", err, count, then, state.upcoming_sleep)

        return {
            "stop": tenacity.stop_never,
            "wait": wait,
            "retry": retry,
            "before_sleep": before_sleep,
            "reraise": True,
        }


class Attempts:
    """One call's record across its attempts, for the retry policy; no I/O.

    It counts the failures that spend ``max_attempts``: every one, or with ``progress`` (bytes a
    download has written) only those since the last attempt that moved forward, since a resumed
    transfer that keeps advancing is not failing; an attempt cut off at its deadline is not progress,
    or a trickling server would be resumed for ever. It remembers an attempt whose outcome is unknown,
    which is what the call's ``on_unknown`` acts on: :attr:`look` tells the driver to list before the
    next attempt, and a conflict after it is read as possibly the earlier attempt's doing.
    """

    def __init__(
        self,
        on_unknown: OnUnknown = "repeat",
        log: logging.Logger | Any = None,
        progress: Callable[[], int] | None = None,
    ) -> None:
        self.on_unknown: OnUnknown = on_unknown
        self.log = log or logging.getLogger(__name__)
        self.failures = 0
        self._progress = progress
        self._mark = progress() if progress is not None else 0
        self._uncertain: AbmApiError | None = None

    def failed(self, err: BaseException) -> int:
        """Record a failed attempt; the count :meth:`Pipeline.may_retry` weighs it by."""
        if self._progress is None:
            self.failures += 1
        else:
            now = self._progress()
            moved = now > self._mark and getattr(err, "kind", None) != "timeout"
            self.failures, self._mark = (1 if moved else self.failures + 1), now
        if not isinstance(err, AbmApiError):
            return self.failures
        if err.outcome_unknown:
            self._uncertain = err
        elif err.http_status == 409 and self._uncertain is not None and self.on_unknown == "resend":
            earlier = self._uncertain.http_status or "no answer"
            err.message += f" (an earlier attempt failed with {earlier} and may have created it)"
            err.outcome_unknown = True
        return self.failures

    @property
    def look(self) -> Reconcile | None:
        """The listing to read before the next attempt: the last one may have made the item."""
        on = self.on_unknown
        return on if isinstance(on, Reconcile) and self._uncertain is not None else None

    def settle(self, wait: float, limits: Limits) -> float:
        """The wait before looking: a request that got no answer may still be running on the server,
        so it is given as long again as an attempt (capped at ``retry_max_wait``) to land first. A
        slower server can still race the look: only idempotency keys would close that gap.
        """
        if self.look is not None and self._uncertain is not None and self._uncertain.http_status is None:
            return max(wait, min(limits.request_timeout, limits.retry_max_wait))
        return wait

    def found(self, items: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
        """What the look found in the listing's ``items``: the item this create made, or ``None`` to
        send it again; several new items of that name raise the unknown outcome, which stays unknown.
        """
        look, err = self.look, self._uncertain
        assert look is not None and err is not None
        new = [dict(item) for item in items if look.made(item)]
        if len(new) > 1:
            err.message += f"; {len(new)} new items of that name appeared ({new}): which is ours?"
            raise err
        took = "took effect: using it" if new else "did not take effect: sending it again"
        self.log.warning("%s (%s) %s %s", err.path, err.message, took, new)
        if new:
            return new[0]
        self._uncertain = None
        return None
