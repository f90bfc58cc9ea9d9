"""``requests``-level details of the sync hook: what a failure means and where the key may go."""

from __future__ import annotations

from collections.abc import Iterator

import requests
from requests.auth import AuthBase
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks._policy import AbmSettings, Redactor, url_origin


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: urllib3 keeps the real cause in ``reason`` or ``args[0]``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        reason = getattr(current, "reason", None)
        nested = current.args[0] if current.args and isinstance(current.args[0], BaseException) else None
        current = (
            reason
            if isinstance(reason, BaseException)
            else nested or current.__cause__ or current.__context__
        )


def request_was_sent(exc: BaseException) -> bool:
    """Whether ``requests`` may have delivered the request before failing (only then may it have acted)."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return False
    return not any(
        isinstance(cause, (NewConnectionError, ConnectTimeoutError, ConnectionRefusedError))
        for cause in _causes(exc)
    )


def innermost(exc: BaseException) -> BaseException:
    """The root cause, whose text says what happened without urllib3's retry wrapping."""
    *_, last = _causes(exc)
    return last


def tls_error(method: str, path: str, exc: BaseException, redact: Redactor, conn_id: str) -> AbmApiError:
    """A failed TLS handshake: final (a retry meets the same certificate), with the setting to change."""
    return AbmApiError(
        method=method,
        path=path,
        http_status=None,
        status=None,
        message=(
            f"TLS failed ({redact(str(innermost(exc)))[:200]}); if the server uses a private CA, set extra "
            f'"verify" of connection {conn_id!r} to the CA bundle path'
        ),
    )


class OriginBoundAuth(AuthBase):
    """Adds ``Authorization`` to requests for the API origin only, and strips it from any other.

    Bound to the session, so every request the hook makes is covered, including a download whose
    link happens to point elsewhere: the key reaches the API and nothing else.
    """

    def __init__(self, settings: AbmSettings) -> None:
        self._origin = settings.origin
        self._header = settings.auth_header()["Authorization"]

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        if request.url and url_origin(request.url) == self._origin:
            request.headers["Authorization"] = self._header
        else:
            request.headers.pop("Authorization", None)
        return request

    def __repr__(self) -> str:
        return f"OriginBoundAuth(origin={self._origin!r})"
