"""Reading the emulator's request log: what reached each origin, with which headers."""

from __future__ import annotations

from typing import Any


def seen(
    emulator: Any,
    *,
    method: str | None = None,
    path: str | None = None,
    origin: str | None = None,
    answered: bool = False,
) -> list[dict[str, Any]]:
    """Requests the emulator logged (both origins, admin calls left out), oldest first, filtered.

    A request is logged when it arrives and gets its status when its answer starts: ``answered``
    keeps only those, for a test that waits for a request before changing what it would see."""
    entries = emulator.requests_seen()
    if isinstance(entries, dict):
        entries = entries["requests"]
    found = []
    for entry in entries:
        entry_path = str(entry.get("path", ""))
        if entry_path.startswith("/_admin"):
            continue
        if method is not None and entry.get("method") != method:
            continue
        if path is not None and entry_path.split("?", 1)[0] != path:
            continue
        if origin is not None and entry.get("origin") != origin:
            continue
        if answered and entry.get("status") is None:
            continue
        found.append(entry)
    return found


def header(entry: dict[str, Any], name: str) -> str | None:
    """A request header from a logged request, whatever the case of its name."""
    headers = entry.get("headers") or {}
    if isinstance(headers, list):
        headers = dict(headers)
    for key, value in headers.items():
        if key.lower() == name.lower():
            return str(value)
    return None
