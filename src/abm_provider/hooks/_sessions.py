"""One ``aiohttp`` session per event loop and client settings, shared by every async hook on that loop.

Why: a triggerer runs hundreds of ``ExecutionCompleteTrigger`` s in one event loop. With a session
each, every poll opens a new connection (the service closes idle ones between polls) and the loop
carries a thousand connectors' worth of objects through every garbage collection. Measured with
1,000 triggers against the emulator, a shared session halves the CPU of a poll round. Its connector
caps the open connections (``limit``), so a thousand simultaneous polls use a hundred sockets in
turn rather than a thousand at once.

Sessions are counted: each hook takes one on first use and gives it back in ``close``; the last one
given back closes it, so a test's event loop ends with nothing left open. A session belongs to the
loop that made it (aiohttp binds it there), hence the per-loop table.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

#: Connections one shared session keeps open at most (aiohttp's own default for one session).
CONNECTION_LIMIT = 100


@dataclass
class _Entry:
    session: Any
    users: int = 0


_tables: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, _Entry]] = (
    weakref.WeakKeyDictionary()
)


def _new_session(verify: bool | str, timeout: float, headers: dict[str, str]) -> Any:
    import aiohttp

    context: bool | ssl.SSLContext = verify if isinstance(verify, bool) else True
    if isinstance(verify, str):
        context = ssl.create_default_context(cafile=verify)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context, limit=CONNECTION_LIMIT),
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout),
    )


def acquire(verify: bool | str, timeout: float, headers: dict[str, str]) -> tuple[Hashable, Any]:
    """The running loop's session for these settings, made on first use, and the key it is kept under.

    Give both back with :func:`release`.
    """
    table = _tables.setdefault(asyncio.get_running_loop(), {})
    key: Hashable = (verify, timeout, tuple(sorted(headers.items())))
    entry = table.get(key)
    if entry is None or entry.session.closed:
        entry = table[key] = _Entry(_new_session(verify, timeout, headers))
    entry.users += 1
    return key, entry.session


async def release(key: Hashable, session: Any) -> None:
    """Give a session back; the last user closes it."""
    table = _tables.get(asyncio.get_running_loop(), {})
    entry = table.get(key)
    if entry is None or entry.session is not session:  # made on another loop, or already replaced
        if not session.closed:
            await session.close()
        return
    entry.users -= 1
    if entry.users <= 0:
        del table[key]
        await session.close()


def open_sessions() -> int:
    """Sessions the running loop holds open (for tests and diagnostics)."""
    return len(_tables.get(asyncio.get_running_loop(), {}))
