"""An ABM connection as the hooks read it, with no connection table and no server, and the request
pipeline built on it.

For the tests of the hooks' rules and of what callers make of an answer: the pipeline interprets an
answer made up in a test exactly as it would the service's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from abm_provider.hooks._pipeline import Pipeline
from abm_provider.hooks.settings import AbmSettings

#: An API key shaped like a real one, so a test can look for it where it must not be.
KEY = "sk-live-0123456789abcdef"


def abm_connection(
    host: str | None = "https://api.example.com",
    password: str | None = KEY,
    conn_id: str = "abm_test",
    **extra: Any,
) -> Any:
    """What ``BaseHook.get_connection`` would give for an ``abm`` connection with these fields."""
    return SimpleNamespace(conn_id=conn_id, host=host, port=None, password=password, extra_dejson=extra)


def abm_pipeline(conn: Any = None, **limits: Any) -> Pipeline:
    """The hooks' request pipeline over ``conn`` (:func:`abm_connection` by default)."""
    return Pipeline(AbmSettings.from_connection(conn or abm_connection(), **limits))
