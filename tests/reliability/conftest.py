"""Fixtures for the reliability tests (``abm`` and ``context`` are the suite's, in ``tests/conftest.py``)."""

from __future__ import annotations

from accounts.sync.sync_support import warehouse  # noqa: F401 - the list-sync tests' warehouse fixture

from .badinput_support import pg_schemas  # noqa: F401 - a fixture of every test here
