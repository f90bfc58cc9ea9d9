"""Rules the sync and async hooks share: settings, URL safety, error reading, retry decisions.

Both hooks import this module so that a 429 is waited out, a 400 fails at once, an error body is
read and a path segment is checked in exactly one way whichever HTTP client made the request
(``requests`` in workers, ``aiohttp`` in the triggerer). Nothing here performs I/O; that keeps the
rules testable without a server and keeps the HTTP clients in the hooks.

Retry model. A failed request falls into one of three kinds:

* *refused*: the service did not act (429, 423, a connection that was never established). Safe to
  repeat for any method.
* *uncertain*: the service may have acted (a 5xx other than 501/505, a timeout or reset after the
  request was sent, a 2xx whose body cannot be read). Safe to repeat for reads and idempotent calls;
  a create must first look whether it happened (reconcile) or rely on the service refusing a
  duplicate.
* *final*: repeating cannot help (400, 401, 403, 404, 409...).
"""

from __future__ import annotations

import base64
import email.utils
import ipaddress
import json
import math
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

import tenacity

from abm_provider.exceptions import AbmApiError

DEFAULT_BASE_URL = "https://api.terminusplatform.com"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_MAX_WAIT = 60.0
DEFAULT_TIMEOUT = 60.0
#: First back-off wait in seconds; doubles per attempt up to ``max_wait``, plus up to ``JITTER`` s.
INITIAL_WAIT = 0.5
JITTER = 0.5
REQUEST_ID_HEADER = "x-request-id"
#: Longest error text kept from a body that is not the documented JSON shape (an HTML error page).
_MAX_TEXT = 300
_EXTRA_KEYS = ("max_attempts", "max_wait", "timeout", "verify", "auth_type")
_UNSAFE_SEGMENT = re.compile(r"[/\\\s\x00-\x1f\x7f]")
_TAGS = re.compile(r"<[^>]+>")

FailureKind = Literal["refused", "uncertain", "final"]
AuthType = Literal["bearer", "basic"]


# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryBudget:
    """How hard one call tries: attempts, the longest single wait, and the per-request timeout."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    max_wait: float = DEFAULT_MAX_WAIT
    timeout: float = DEFAULT_TIMEOUT


@dataclass(frozen=True)
class AbmSettings:
    """Everything a hook needs from the connection, checked once, in one place.

    ``repr`` leaves the API key out so a settings object can be logged or shown in a traceback.
    """

    conn_id: str
    base_url: str
    api_key: str
    auth_type: AuthType
    verify: bool | str
    budget: RetryBudget

    def __repr__(self) -> str:
        return (
            f"AbmSettings(conn_id={self.conn_id!r}, base_url={self.base_url!r}, api_key='***', "
            f"auth_type={self.auth_type!r}, verify={self.verify!r}, budget={self.budget!r})"
        )

    @property
    def origin(self) -> tuple[str, str, int]:
        """The API origin; the key goes to this origin and no other."""
        return url_origin(self.base_url)

    def auth_header(self) -> dict[str, str]:
        """``Authorization`` for the API: ``Bearer <key>``, or Basic with the key as user name."""
        if self.auth_type == "basic":
            token = base64.b64encode(f"{self.api_key}:".encode()).decode("ascii")
            return {"Authorization": f"Basic {token}"}
        return {"Authorization": f"Bearer {self.api_key}"}

    def redactor(self) -> Redactor:
        """A redactor for the key in every form it is sent (raw, and inside the Basic token)."""
        secrets = [self.api_key, self.auth_header()["Authorization"].split(" ", 1)[1]]
        return Redactor(secrets)

    @classmethod
    def from_connection(
        cls,
        conn: Any,
        *,
        max_attempts: int | None = None,
        max_wait: float | None = None,
        timeout: float | None = None,
    ) -> AbmSettings:
        """Read base URL, key, auth type, TLS and retry budget; hook arguments win over the extra.

        Extra keys may be plain (``max_attempts``) or as the connection form stores them
        (``extra__abm__max_attempts``); empty values mean "not set". Every error names the
        connection and the setting.
        """
        conn_id = str(getattr(conn, "conn_id", None) or "abm_default")
        extra = _extra_settings(conn, conn_id)
        where = f"connection {conn_id!r}"
        base_url = normalise_base_url(getattr(conn, "host", None), getattr(conn, "port", None), where=where)
        api_key = getattr(conn, "password", None) or ""
        if not api_key:
            raise ValueError(f"{where} has no API key: put the key in its password field")
        auth_type = str(extra.get("auth_type") or "bearer").strip().lower()
        if auth_type not in ("bearer", "basic"):
            raise ValueError(f"{where} extra auth_type must be 'bearer' or 'basic', got {auth_type!r}")
        budget = RetryBudget(
            max_attempts=_int_setting(max_attempts, extra.get("max_attempts"), "max_attempts", where),
            max_wait=_float_setting(max_wait, extra.get("max_wait"), "max_wait", where, DEFAULT_MAX_WAIT),
            timeout=_float_setting(timeout, extra.get("timeout"), "timeout", where, DEFAULT_TIMEOUT),
        )
        if budget.timeout <= 0:
            raise ValueError(f"{where}: timeout must be greater than 0, got {budget.timeout}")
        return cls(
            conn_id=conn_id,
            base_url=base_url,
            api_key=api_key,
            auth_type="basic" if auth_type == "basic" else "bearer",
            verify=_verify_setting(extra.get("verify"), where),
            budget=budget,
        )


def _extra_settings(conn: Any, conn_id: str) -> dict[str, Any]:
    try:
        raw = getattr(conn, "extra_dejson", None) or {}
    except Exception as err:  # a malformed extra string
        raise ValueError(f"connection {conn_id!r} has an extra that is not a JSON object: {err}") from err
    if not isinstance(raw, Mapping):
        raise ValueError(f"connection {conn_id!r} extra must be a JSON object")
    settings: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.removeprefix("extra__abm__")
        if name in _EXTRA_KEYS and value not in (None, ""):
            settings[name] = value
    return settings


def _int_setting(given: int | None, extra: Any, name: str, where: str) -> int:
    value: Any = given if given is not None else extra
    if value is None:
        return DEFAULT_MAX_ATTEMPTS
    try:
        number = int(value)
        if number != float(value) or isinstance(value, bool):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {name} must be a whole number >= 1, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{where}: {name} must be >= 1, got {number}")
    return number


def _float_setting(given: float | None, extra: Any, name: str, where: str, default: float) -> float:
    value: Any = given if given is not None else extra
    if value is None:
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {name} must be a number of seconds, got {value!r}") from None
    if number < 0 or not math.isfinite(number):
        raise ValueError(f"{where}: {name} must be a finite number >= 0, got {number}")
    return number


def _verify_setting(value: Any, where: str) -> bool | str:
    """``true``/``false`` (also as text) or the path of a CA bundle file."""
    if value is None:
        return True
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        return value.strip()
    raise ValueError(f"{where} extra verify must be true, false or a CA bundle path, got {value!r}")


# --- URLs ----------------------------------------------------------------------------------------


def is_loopback_host(host: str | None) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``: the only hosts plain ``http://`` may be used with."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` with the scheme's default port filled in, for same-origin checks."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port


def check_transport(url: str, *, what: str) -> None:
    """Refuse anything but https, and plain http to a loopback host (the emulator, a tunnel)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        return
    if scheme == "http":
        if is_loopback_host(parts.hostname):
            return
        raise ValueError(
            f"{what} uses plain http:// to {parts.hostname!r}; the API key and data would travel "
            "unencrypted. Use https:// (plain http is allowed only for 127.0.0.1, ::1 and localhost)"
        )
    raise ValueError(f"{what} must be an https:// URL, got scheme {parts.scheme!r}")


def normalise_base_url(host: str | None, port: int | None = None, *, where: str = "connection") -> str:
    """The API base URL from a connection's host (and port): scheme default https, no trailing slash.

    An empty host means the production service. A host may carry a path prefix (a gateway), but no
    user name, query or fragment: those would end up in every URL and every log line.
    """
    text = (host or "").strip()
    if not text:
        text = DEFAULT_BASE_URL
    if "://" not in text:
        text = "https://" + text
    parts = urlsplit(text)
    if not parts.hostname:
        raise ValueError(f"{where}: host {host!r} has no host name")
    if parts.username or parts.password:
        raise ValueError(f"{where}: put the API key in the password field, not in the host URL")
    if parts.query or parts.fragment:
        raise ValueError(f"{where}: host {host!r} must not carry a query string or fragment")
    try:
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as err:
        raise ValueError(f"{where}: host {host!r} has an invalid port: {err}") from None
    netloc = parts.netloc
    if port and parts.port is None:
        netloc = f"{netloc}:{int(port)}"
    url = f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}"
    check_transport(url, what=f"{where} host")
    return url


def path_segment(value: Any, name: str) -> str:
    """Check a user-supplied value used as one path segment and percent-encode it.

    A list id of ``"../folders"`` or ``"x/accounts/remove"`` must not reach another endpoint, so
    slashes, backslashes, dot segments, whitespace and control characters are refused with an error
    naming the argument; everything else is percent-encoded, so ``?``, ``#`` and ``%`` cannot change
    the request either.
    """
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if not value:
        raise ValueError(f"{name} is empty")
    if value in (".", "..") or _UNSAFE_SEGMENT.search(value):
        raise ValueError(
            f"{name} {value!r} is not a valid identifier: it must not contain '/', '\\', whitespace "
            "or control characters, or be '.' or '..'"
        )
    return quote(value, safe="")


def encode_query(params: Mapping[str, Any]) -> str:
    """A query string with spaces as ``%20`` (the service documents ``orderBy=updateTime%20asc``).

    ``None`` values are left out; sequences repeat the parameter (``folderIds=a&folderIds=b``).
    """
    kept = {key: value for key, value in params.items() if value is not None}
    return urlencode(kept, doseq=True, quote_via=quote)


def loggable_url(url: str) -> str:
    """Origin and path only: a pre-signed link's query is a credential for that file."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


# --- secrets -------------------------------------------------------------------------------------


class Redactor:
    """Replaces secrets in text that may reach a log line or an exception (an echoed header, a URL)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text


# --- reading answers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorBody:
    """What an error answer says, whatever shape it came in."""

    status: str | None
    message: str
    field_violations: list[dict[str, str]]


def parse_error_body(
    http_status: int, body: bytes | str | None, content_type: str | None = None
) -> ErrorBody:
    """Read the documented ``{"error": {code, message, status, details}}`` body, tolerating others.

    Gateways and object stores answer with other shapes (``{"detail": ...}``, ``{"message": ...}``,
    S3's XML ``<Error><Code>``, an HTML page, nothing at all); each still yields a message, and an
    empty or unreadable body falls back to the HTTP reason phrase.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    text = text.strip()
    status: str | None = None
    message = ""
    violations: list[dict[str, str]] = []
    data: Any = None
    if text[:1] in ("{", "["):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            raw_status = error.get("status")
            status = str(raw_status) if isinstance(raw_status, str) and raw_status else None
            message = _as_text(error.get("message") or error.get("detail") or error.get("error_description"))
            violations = _field_violations(error.get("details"))
            if not message and isinstance(error.get("detail"), list):  # FastAPI validation errors
                message = "; ".join(
                    _as_text(item.get("msg")) for item in error["detail"] if isinstance(item, dict)
                )
        elif isinstance(error, str):
            message = error
    elif text.startswith("<"):
        code = re.search(r"<Code>([^<]*)</Code>", text)
        found = re.search(r"<Message>([^<]*)</Message>", text)
        if code or found:
            status = code.group(1).strip() if code else None
            message = found.group(1).strip() if found else ""
        else:
            message = " ".join(_TAGS.sub(" ", text).split())
    elif text:
        message = text
    if not message:
        try:
            message = HTTPStatus(http_status).phrase
        except ValueError:
            message = "error"
    if len(message) > _MAX_TEXT:
        message = message[:_MAX_TEXT] + "..."
    return ErrorBody(status=status, message=message, field_violations=violations)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _field_violations(details: Any) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    if not isinstance(details, list):
        return found
    for detail in details:
        if not isinstance(detail, dict):
            continue
        for item in detail.get("fieldViolations") or detail.get("field_violations") or []:
            if isinstance(item, dict):
                found.append(
                    {"field": _as_text(item.get("field")), "description": _as_text(item.get("description"))}
                )
    return found


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds or an HTTP date; ``None`` if unusable.

    A date in the past means "now" (0). Fractions are accepted although RFC 9110 allows integers only,
    because being lenient costs nothing here.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds):
        return max(0.0, seconds)
    if not math.isnan(seconds):
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = now if now is not None else time.time()
    return max(0.0, when.timestamp() - current)


def http_date(timestamp: float) -> str:
    """An RFC 9110 HTTP date, for tests and for logging a Retry-After deadline."""
    return email.utils.format_datetime(datetime.fromtimestamp(timestamp, tz=timezone.utc), usegmt=True)


def failure_kind(http_status: int | None, *, sent: bool = True) -> FailureKind:
    """Classify a failed request (see the module docstring); ``http_status`` ``None`` = no answer."""
    if http_status is None:
        return "uncertain" if sent else "refused"
    if http_status in (429, 423):
        return "refused"
    if 500 <= http_status <= 599 and http_status not in (501, 505):
        return "uncertain"
    return "final"


def api_error(
    *,
    method: str,
    path: str,
    http_status: int | None,
    body: bytes | str | None,
    content_type: str | None,
    request_id: str | None,
    retry_after: str | None,
    idempotent: bool,
    redact: Redactor,
) -> AbmApiError:
    """An :class:`AbmApiError` for an error answer, classified for the retry loop, secrets removed."""
    parsed = parse_error_body(http_status or 0, body, content_type)
    kind = failure_kind(http_status)
    return AbmApiError(
        method=method,
        path=path,
        http_status=http_status,
        status=parsed.status,
        message=redact(parsed.message),
        field_violations=[{k: redact(v) for k, v in item.items()} for item in parsed.field_violations],
        request_id=request_id,
        outcome_unknown=kind == "uncertain" and not idempotent,
        transient=kind != "final",
        retry_after=parse_retry_after(retry_after),
    )


def transport_error(
    *, method: str, path: str, exc: BaseException, sent: bool, idempotent: bool, redact: Redactor
) -> AbmApiError:
    """An :class:`AbmApiError` for a request that got no (complete) answer."""
    # An exception that only describes (a body that ended early) reads better without its class name.
    reason = redact(str(exc) if getattr(exc, "self_describing", False) else f"{type(exc).__name__}: {exc}")
    if len(reason) > _MAX_TEXT:
        reason = reason[:_MAX_TEXT] + "..."
    what = "no answer (connection lost after the request was sent)" if sent else "could not connect"
    return AbmApiError(
        method=method,
        path=path,
        http_status=None,
        status=None,
        message=f"{what}: {reason}",
        outcome_unknown=sent and not idempotent,
        transient=True,
    )


def unreadable_answer_error(
    *, method: str, path: str, http_status: int, detail: str, request_id: str | None, idempotent: bool
) -> AbmApiError:
    """A 2xx whose body is not the JSON object the API promises: the call may well have worked."""
    return AbmApiError(
        method=method,
        path=path,
        http_status=http_status,
        status=None,
        message=f"the answer is not the JSON object the API documents ({detail})",
        request_id=request_id,
        outcome_unknown=not idempotent,
        transient=True,
    )


# --- retrying ------------------------------------------------------------------------------------


class BackoffWait(tenacity.wait.wait_base):
    """Capped exponential back-off with jitter, never shorter than the server's ``Retry-After``.

    ``INITIAL_WAIT * 2**(n-1)`` plus up to ``JITTER`` s, capped at ``max_wait``; when the failed
    answer carried ``Retry-After`` the wait is at least that (the retry predicate has already refused
    to retry when ``Retry-After`` exceeds ``max_wait``, so honouring it never breaks the cap).
    ``attempt_of`` lets a caller count failures its own way (a download counts only failures since
    its last progress) instead of tenacity's attempt number.
    """

    def __init__(
        self, max_wait: float, *, attempt_of: Callable[[tenacity.RetryCallState], int] | None = None
    ) -> None:
        self.max_wait = max_wait
        self.attempt_of = attempt_of

    def backoff(self, attempt: int) -> float:
        """The jittered exponential part for the ``attempt``-th failure (1-based), capped."""
        exponential = INITIAL_WAIT * 2 ** min(max(attempt, 1) - 1, 60)
        return min(exponential + random.uniform(0, JITTER), self.max_wait)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        attempt = self.attempt_of(retry_state) if self.attempt_of else retry_state.attempt_number
        wait = self.backoff(attempt)
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None and outcome.failed else None
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            wait = max(wait, float(retry_after))
        return wait


def should_retry(err: BaseException, *, budget: RetryBudget, may_repeat_uncertain: bool) -> bool:
    """Whether the retry loop may try again after ``err`` (the attempt count is checked separately).

    A ``Retry-After`` longer than ``max_wait`` ends the call at once, with the wait named in the
    message, rather than retrying early and burning attempts on more 429s.
    """
    if not isinstance(err, AbmApiError) or not err.transient:
        return False
    if err.outcome_unknown and not may_repeat_uncertain:
        return False
    if err.retry_after is not None and err.retry_after > budget.max_wait:
        err.message += (
            f" (the service asked to retry after {err.retry_after:.0f} s, longer than max_wait="
            f"{budget.max_wait:g} s; raise max_wait to wait that long)"
        )
        return False
    return True


def retry_logger(log: Any, budget: RetryBudget) -> Callable[[tenacity.RetryCallState], None]:
    """A tenacity ``before_sleep`` that logs one warning per retry: what failed, when the next try is.

    The line is the error's own text (already redacted), so it never carries the key.
    """

    def before_sleep(state: tenacity.RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome is not None else None
        if isinstance(err, AbmApiError):
            log.warning(
                "%s - attempt %d/%d, retrying in %.1f s",
                err,
                state.attempt_number,
                budget.max_attempts,
                state.upcoming_sleep,
            )

    return before_sleep
