"""The service's error body (AIP-193 through a JSON gateway) and the exception that carries it.

Every error the emulator answers, from the API handlers, the admin API, the fault injector and the rate
limiter, goes through `error_payload`, so clients see exactly one error shape whatever produced it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# HTTP status -> canonical status name, for errors raised without an explicit one (faults, routing).
STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    423: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_name(code: int) -> str:
    """The canonical status for an HTTP code; unknown 4xx/5xx fall back to the nearest generic one."""
    if code in STATUS_NAMES:
        return STATUS_NAMES[code]
    return "INTERNAL" if code >= 500 else "FAILED_PRECONDITION" if code >= 400 else "OK"


@dataclass
class ApiError(Exception):
    """An error answer: raise it anywhere in a handler and the app renders the documented body."""

    code: int
    message: str
    status: str = ""
    field_violations: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)
        if not self.status:
            self.status = status_name(self.code)

    def payload(self) -> dict[str, object]:
        return error_payload(self.code, self.message, self.status, self.field_violations)


def error_payload(
    code: int, message: str, status: str | None = None, field_violations: list[tuple[str, str]] | None = None
) -> dict[str, object]:
    """The documented body: ``{"error": {code, message, status, details: [{fieldViolations}]}}``."""
    body: dict[str, object] = {"code": code, "message": message, "status": status or status_name(code)}
    if field_violations:
        body["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": f, "description": d} for f, d in field_violations],
            }
        ]
    else:
        body["details"] = []
    return {"error": body}


def error_bytes(code: int, message: str, status: str | None = None) -> bytes:
    """The error body serialized, for the pure-ASGI layers that answer without FastAPI."""
    return json.dumps(error_payload(code, message, status)).encode()


def invalid(field_name: str, description: str, status: str = "INVALID_ARGUMENT") -> ApiError:
    """A 400 naming one field, the most common error of the API."""
    return ApiError(400, f"Invalid {field_name}: {description}", status, [(field_name, description)])
