"""pytest plugin (entry point ``pytest11``): test your own DAGs and operators against the emulator.

Installing ``abm-emulator`` makes these fixtures available in every pytest run:

- ``abm_emulator``: the run's emulator, reset to an empty state with no faults before each test,
  with ``AIRFLOW_CONN_ABM_DEFAULT`` pointing at it for the length of the test, so an operator with
  the default ``abm_conn_id`` talks to it;
- ``abm_emulator_process``: the same process without the reset (one per test session);
- ``abm_emulator_options``: the command-line options it starts with, as keyword arguments of
  :func:`abm_emulator.testing.start_emulator`; override this fixture in a ``conftest.py`` to change
  them (``{"api_keys": ["a", "b"], "clock_speed": 60}``).

The emulator runs as a real subprocess on free loopback ports, so the code under test talks HTTP
exactly as it would to the real service. Nothing is imported until a fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from abm_emulator.testing import RunningEmulator

#: The key the emulator accepts unless ``abm_emulator_options`` says otherwise.
DEFAULT_TEST_API_KEY = "abm-test-key"


@pytest.fixture(scope="session")
def abm_emulator_options() -> dict[str, Any]:
    """Keyword arguments for ``start_emulator``; override in a ``conftest.py`` to change them."""
    return {"api_keys": [DEFAULT_TEST_API_KEY]}


@pytest.fixture(scope="session")
def abm_emulator_process(abm_emulator_options: dict[str, Any]) -> Iterator[RunningEmulator]:
    """One emulator subprocess for the whole session, stopped at its end."""
    from abm_emulator.testing import start_emulator

    with start_emulator(**abm_emulator_options) as running:
        yield running


@pytest.fixture
def abm_emulator(abm_emulator_process: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> RunningEmulator:
    """The session's emulator, reset, with the ``abm_default`` connection pointing at it."""
    abm_emulator_process.reset()
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", abm_emulator_process.airflow_connection())
    return abm_emulator_process
