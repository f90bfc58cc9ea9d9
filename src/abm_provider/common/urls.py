"""The URL rules and the redactor: the one place that decides where a request may go and what a
log line or an error may say about it.

The rules (:func:`check_url`) hold for the API base URL, a download link and every redirect hop of a
download, and again for the address a connection actually reached (:func:`check_peer`), so a host
name that resolves to a metadata address is refused too: ``https``, or ``http`` to a loopback host
only; never a link-local, unspecified, multicast or cloud-metadata address; no other scheme, no
user name in the URL.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

DEFAULT_BASE_URL = "https://api.terminusplatform.com"
#: Host names of cloud metadata services (their addresses are refused by kind, see ``_forbidden_ip``).
_METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data"})
_METADATA_IPS = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200"))
_UNSAFE_SEGMENT = re.compile(r"[/\\\s\x00-\x1f\x7f]")
#: Query parameters whose value is a credential (S3, GCS, Azure SAS and generic signed links).
_SECRET_PARAM = re.compile(r"sig|signature|token|credential|key|secret|auth|password|policy|sas", re.I)
_SECRET_IN_TEXT = re.compile(
    r"(?i)([?&;][^=&\s\"'<>]*(?:sig|signature|token|credential|key|secret|auth|password|policy)"
    r"[^=&\s\"'<>]*=)[^&\s\"'<>]+"
)


class UnsafeUrlError(ValueError):
    """A URL that breaks the rules; the message names the rule and shows the URL without its query."""


def _as_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host names literally, including the forms a resolver accepts (``127.1``, ``0x7f.1``)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not re.fullmatch(r"[0-9a-fA-FxX.]+", host) or not host[:1].isdigit():
            return None
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forbidden_ip(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if address in _METADATA_IPS:
        return "a cloud metadata address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services live)"
    if address.is_unspecified or address.is_multicast:
        return "not a host address"
    return None


def is_loopback_host(host: str | None) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``: the only hosts plain ``http://`` may be used with."""
    name = (host or "").strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = _as_ip(name) if name else None
    return address is not None and address.is_loopback


def safe_url(url: str) -> str:
    """Origin and path only, for logs and errors: a pre-signed link's query is a credential."""
    parts = urlsplit(url)
    return (
        f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if _port(parts) else ''}{parts.path}"
        + ("?<redacted>" if parts.query else "")
    )


def _port(parts: Any) -> int | None:
    try:
        return parts.port  # type: ignore[no-any-return]
    except ValueError:
        return None


def check_url(url: Any, what: str) -> str:
    """Return ``url`` stripped if it may be requested; raise :class:`UnsafeUrlError` naming the rule."""
    if not isinstance(url, str) or not url.strip():
        raise UnsafeUrlError(f"{what} must be a non-empty URL, got {url!r}")
    url = url.strip()
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    shown = safe_url(url) if scheme else repr(url[:80])
    if scheme not in ("https", "http"):
        raise UnsafeUrlError(
            f"{what} {shown} has scheme {scheme or '(none)'!r}; only https is allowed "
            "(plain http only to a loopback host)"
        )
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeUrlError(f"{what} {shown} has no host")
    if parts.username or parts.password:
        raise UnsafeUrlError(f"{what} {shown} carries a user name or password; credentials go elsewhere")
    if _port(parts) is None and parts.netloc.rsplit("]", 1)[-1].count(":"):
        raise UnsafeUrlError(f"{what} {shown} has an invalid port")
    address = _as_ip(host)
    reason = _forbidden_ip(address) if address is not None else None
    if host.lower() in _METADATA_NAMES:
        reason = "a cloud metadata host"
    if reason:
        raise UnsafeUrlError(f"{what} {shown} points at {host!r}, {reason}; refused")
    if scheme == "http" and not is_loopback_host(host):
        raise UnsafeUrlError(
            f"{what} {shown} uses plain http:// to {host!r}, where the key and data would travel "
            "unencrypted; use https:// (plain http is allowed only for 127.0.0.1, ::1 and localhost)"
        )
    return url


def check_peer(peer: str, scheme: str, what: str) -> None:
    """The same rules for the address a connection reached (a name may resolve anywhere)."""
    address = _as_ip(peer.split("%", 1)[0])
    if address is None:
        return
    reason = _forbidden_ip(address)
    if reason is None and scheme == "http" and not address.is_loopback:
        reason = "not loopback, and the URL is plain http"
    if reason:
        raise UnsafeUrlError(f"{what} resolved to {address}, {reason}; refused")


def url_origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` with the scheme's default port filled in, for same-origin checks."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), _port(parts) or (443 if scheme == "https" else 80)


def normalise_base_url(host: str | None, port: int | None = None, *, where: str = "connection") -> str:
    """The API base URL from a connection's host (and port): scheme default https, no trailing slash.

    An empty host means the production service. A host may carry a path prefix (a gateway), but no
    user name, query or fragment: those would end up in every URL and every log line.
    """
    text = (host or "").strip() or DEFAULT_BASE_URL
    if "://" not in text:
        text = "https://" + text
    parts = urlsplit(text)
    if parts.query or parts.fragment:
        raise ValueError(f"{where}: host {safe_url(text)!r} must not carry a query string or fragment")
    netloc = parts.netloc
    in_url = _port(parts)
    if port and in_url is not None and in_url != int(port):
        raise ValueError(f"{where}: host {safe_url(text)!r} has port {in_url} but the port field says {port}")
    if port and in_url is None and ":" not in netloc.rsplit("]", 1)[-1]:
        netloc = f"{netloc}:{int(port)}"
    url = f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}"
    return check_url(url, f"{where}: host")


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


class Redactor:
    """Removes secrets from any text bound for a log line, an exception or an XCom.

    It knows the API key in every form it is sent, the credential values of every link it was shown
    (:meth:`learn`), and masks credential-named query parameters of any URL echoed in the text.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: list[str] = []
        self._add(secrets)

    def _add(self, secrets: Iterable[str]) -> None:
        found = set(self.secrets)
        for secret in secrets:
            if secret and len(secret) >= 4:
                found.update((secret, quote(secret, safe="")))
        self.secrets = sorted(found, key=len, reverse=True)

    def learn(self, url: str) -> None:
        """Treat the credential values in ``url``'s query as secrets from now on."""
        values = [v for k, v in parse_qsl(urlsplit(url).query) if _SECRET_PARAM.search(k) and len(v) >= 8]
        self._add(values)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return _SECRET_IN_TEXT.sub(r"\1***", text) if "=" in text else text
