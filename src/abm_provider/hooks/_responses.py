"""Reading what a server sent, within bounds: decoding, JSON depth, error bodies, ``Retry-After``.

Pure functions over bytes and headers, used by the request pipeline for every answer whichever HTTP
client fetched it. A body is never trusted: compression is undone only up to a byte limit, JSON is
refused past a nesting depth (and never raises ``RecursionError``), and an error body of any shape
(the documented JSON, a gateway's JSON, S3's XML, an HTML page) yields a short message.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from http import HTTPStatus
from typing import Any

#: Longest text kept from an error body or an exception.
MAX_TEXT = 300
_TAGS = re.compile(r"<[^>]+>")


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, marked where it was cut."""
    return text if len(text) <= limit else text[:limit] + "..."


def decode(body: bytes, headers: Mapping[str, str], limit: int, *, cut: bool = False) -> bytes:
    """The body with any ``gzip``/``deflate`` undone, at most ``limit`` bytes after decoding.

    The hooks ask for no compression and decode here rather than in the HTTP client, so a small
    compressed answer cannot expand into gigabytes of memory.
    """
    encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding in ("", "identity"):
        pass
    elif encoding in ("gzip", "x-gzip", "deflate"):
        try:
            body = zlib.decompressobj(47 if encoding != "deflate" else 15).decompress(body, limit + 1)
        except zlib.error as err:
            raise ValueError(f"a {encoding} body that cannot be decoded: {err}") from None
    else:
        raise ValueError(f"Content-Encoding {encoding!r}, which was not asked for")
    if len(body) > limit and not cut:
        raise ValueError(f"more than {limit} bytes")
    return body[:limit]


def check_depth(value: Any, max_depth: int) -> None:
    """Raise ``ValueError`` when ``value`` nests deeper than ``max_depth`` (walked without recursion)."""
    level: list[Any] = [value]
    for depth in range(1, max_depth + 2):
        deeper = [
            child
            for item in level
            for child in (item.values() if type(item) is dict else item)
            if type(child) is dict or type(child) is list
        ]
        if not deeper:
            return
        if depth >= max_depth:
            raise ValueError(f"JSON nested deeper than {max_depth} levels")
        level = deeper


_JSON_BRACKET = re.compile(rb"[\[\]{}]")
#: A pair of brackets with no bracket inside: one level, the innermost.
_JSON_INNERMOST = re.compile(rb"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


def _outside_strings(body: bytes) -> bytes:
    """JSON text with its string literals taken out: the brackets left are its structure.

    Escaped backslashes, then escaped quotes, are dropped first; every quote left then opens or
    closes a string, so the text outside them is every other piece between quotes. Done with bytes
    methods, since an answer echoing a thousand accounts holds thousands of strings.
    """
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(unescaped.split(b'"')[0::2])


def nests_deeper(body: bytes, max_depth: int) -> bool:
    """Whether JSON text opens more than ``max_depth`` brackets at once, found without parsing it.

    The parser recurses once per level. Letting it run into the recursion limit on a hostile body is
    not enough: a garbage collection that happens down there runs other objects' finalizers with no
    stack left, and they fail where nobody can catch it. So a body that nests too deep is refused
    before it is parsed.

    The innermost pairs are taken away a level per pass, in the regular expression engine, so a wide
    answer (a thousand accounts echoed back) costs a few passes, not a Python step per bracket. What
    is left after ``max_depth`` passes (too deep, or brackets that do not pair) is decided by counting
    the brackets one by one.
    """
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    stripped = text = _outside_strings(body)
    for _ in range(max_depth):
        text, taken = _JSON_INNERMOST.subn(b"0", text)
        if not taken:
            break
    if not _JSON_BRACKET.search(text):
        return False
    depth = 0
    for bracket in _JSON_BRACKET.finditer(stripped):
        if bracket.group() in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def parse_json(body: bytes, max_depth: int) -> Any:
    """Parse JSON, refusing nesting deeper than ``max_depth`` (and never raising ``RecursionError``)."""
    if nests_deeper(body, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    try:
        data = json.loads(body)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    if type(data) is dict or type(data) is list:
        check_depth(data, max_depth)
    return data


def parse_object(body: bytes, max_depth: int) -> dict[str, Any]:
    """The body as a JSON object (``{}`` when empty); ``ValueError`` says why it is not one."""
    if not body.strip():
        return {}
    try:
        data = parse_json(body, max_depth)
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8: {err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"invalid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    return data


@dataclass(frozen=True)
class ErrorBody:
    """What an error answer says, whatever shape it came in."""

    status: str | None
    message: str
    field_violations: list[dict[str, str]]


def parse_error_body(http_status: int, body: bytes, max_depth: int = 32) -> ErrorBody:
    """Read the documented ``{"error": {code, message, status, details}}`` body, tolerating others.

    Gateways and object stores answer with other shapes (``{"detail": ...}``, ``{"message": ...}``,
    S3's XML ``<Error><Code>``, an HTML page, nothing at all); each still yields a message, and an
    empty, unreadable or too deep body falls back to the HTTP reason phrase.
    """
    text = body.decode("utf-8", "replace").strip()
    status: str | None = None
    message = ""
    violations: list[dict[str, str]] = []
    data: Any = None
    if text[:1] in ("{", "["):
        try:
            data = parse_json(body, max_depth)
        except ValueError:
            data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            raw_status = error.get("status")
            status = raw_status if isinstance(raw_status, str) and raw_status else None
            message = _as_text(error.get("message") or error.get("detail") or error.get("error_description"))
            violations = _field_violations(error.get("details"))
            if isinstance(error.get("detail"), list):  # FastAPI validation errors
                message = "; ".join(_as_text(i.get("msg")) for i in error["detail"] if isinstance(i, dict))
        elif isinstance(error, str):
            message = error
    elif text.startswith("<"):
        code = re.search(r"<Code>([^<]*)</Code>", text)
        found = re.search(r"<Message>([^<]*)</Message>", text)
        if code or found:
            status = code.group(1).strip() if code else None
            message = found.group(1).strip() if found else ""
        else:
            message = " ".join(_TAGS.sub(" ", text[:8192]).split())
    elif data is None:
        message = text[: MAX_TEXT * 2]
    if not message:
        try:
            message = HTTPStatus(http_status).phrase
        except ValueError:
            message = "error"
    return ErrorBody(status=status, message=clip(message), field_violations=violations)


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else clip(json.dumps(value, default=str))


def _field_violations(details: Any) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict):
            for item in detail.get("fieldViolations") or detail.get("field_violations") or []:
                if isinstance(item, dict):
                    found.append(
                        {
                            "field": _as_text(item.get("field")),
                            "description": _as_text(item.get("description")),
                        }
                    )
    return found


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds or an HTTP date; ``None`` if unusable.

    A date in the past means "now" (0). Fractions are accepted although RFC 9110 allows integers only.
    """
    text = (value or "").strip()
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
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))
