"""Fixtures of the audience-sync tests: the emulator as ``abm_default`` and the list-sync tests' warehouse
(DuckDB, PostgreSQL or MariaDB, each test's own)."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.sync.sync_support import warehouse  # noqa: F401 - the list-sync tests' warehouse fixture
from support.tasks import use_emulator


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The emulator as the default ABM connection."""
    return use_emulator(emulator, monkeypatch)
