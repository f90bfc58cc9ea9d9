"""Fixtures for the emulator's own tests: an authenticated API client per key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from emulator_api import Api


@pytest.fixture
def api(emulator: Any) -> Iterator[Api]:
    client = Api(emulator.base_url, emulator.api_keys[0])
    yield client
    client.session.close()


@pytest.fixture
def api_beta(emulator: Any) -> Iterator[Api]:
    client = Api(emulator.base_url, emulator.api_keys[1])
    yield client
    client.session.close()
