"""Fixtures for hook tests: the emulator behind the default connection, and a look at what it saw."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from abm_provider.hooks.abm import AbmHook
from support.tasks import use_emulator


@pytest.fixture
def abm(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The emulator, reachable through ``abm_default`` as a DAG would configure it."""
    return use_emulator(emulator, monkeypatch)


@pytest.fixture
def hook(abm: Any) -> Iterator[AbmHook]:
    """A hook with a short longest wait, so retry tests stay quick."""
    made = AbmHook(retry_max_wait=10)
    yield made
    made.close()
