"""pytest plugin (entry point ``pytest11``): test your own DAGs and operators against the emulator.

Installing ``abm-emulator`` makes these fixtures available in every pytest run:

- ``abm_emulator``: the run's emulator, reset to an empty state with no faults before each test,
  with ``AIRFLOW_CONN_ABM_DEFAULT`` pointing at it for the length of the test, so an operator with
  the default ``abm_conn_id`` talks to it;
- ``abm_emulator_process``: the same process without the reset (one per test session);
- ``abm_emulator_options``: the command-line options it starts with, as keyword arguments of
  :func:`abm_emulator.testing.start_emulator`; override this fixture in the ``conftest.py`` at the
  root of your tests to change them (``{"api_keys": ["a", "b"], "clock_speed": 60}``).

There is one emulator per session, started with the ``abm_emulator_options`` of the first test that
needs it, so options are session-wide. An override that only some tests see (in a sub-directory's
``conftest.py`` or in a test module) cannot take effect once the emulator runs with other options:
every test that uses the emulator and sees options other than those it was started with fails at
set-up, with a message that shows both option sets and the two ways out (move the override to the
root ``conftest.py``, or start a separate emulator with
:func:`abm_emulator.testing.start_emulator` in a module-scoped fixture). Options compare as the
command line they produce, so key order, a tuple for a list and ``None`` for "not given" do not
count as differences.

The emulator runs as a real subprocess on free loopback ports, so the code under test talks HTTP
exactly as it would to the real service. Nothing is imported until a fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from abm_emulator.testing import RunningEmulator

#: The key the emulator accepts unless ``abm_emulator_options`` says otherwise.
DEFAULT_TEST_API_KEY = "abm-test-key"

#: The session's emulator and the options it was started with, while it runs. Kept on the config so
#: the per-test check can read them; the process is kept to recognise it (a user's own
#: ``abm_emulator_process`` override is a different emulator, with options of its own).
_STARTED: pytest.StashKey[tuple[RunningEmulator, dict[str, Any]]] = pytest.StashKey()

#: ``start_emulator`` keywords that change how it is started, not the emulator it starts.
_NOT_EMULATOR_OPTIONS = frozenset({"startup_timeout"})


@pytest.fixture(scope="session")
def abm_emulator_options() -> dict[str, Any]:
    """Keyword arguments for ``start_emulator``; override in the root ``conftest.py`` to change them.

    Session-wide because the emulator is: see the module docstring for what happens to an override
    that only some tests see.
    """
    return {"api_keys": [DEFAULT_TEST_API_KEY]}


@pytest.fixture(scope="session")
def abm_emulator_process(
    abm_emulator_options: dict[str, Any], pytestconfig: pytest.Config
) -> Iterator[RunningEmulator]:
    """One emulator subprocess for the whole session, stopped at its end.

    Records the options it started with, so a test that sees other options is told instead of
    silently getting this emulator.
    """
    from abm_emulator.testing import start_emulator

    with start_emulator(**abm_emulator_options) as running:
        pytestconfig.stash[_STARTED] = (running, dict(abm_emulator_options))
        try:
            yield running
        finally:
            # Torn down (end of session, or a parametrised options fixture): it runs no more.
            del pytestconfig.stash[_STARTED]


@pytest.fixture(autouse=True)
def _abm_emulator_options_guard(request: pytest.FixtureRequest) -> None:
    """Fail a test whose ``abm_emulator_options`` cannot apply to the session's running emulator.

    pytest caches the session-scoped ``abm_emulator_process`` under its first options, so without
    this check an override seen only by later tests would silently be ignored (a test asking for
    ``clock_speed=2880`` would run at 1.0). Autouse so it also covers tests that use
    ``abm_emulator_process`` directly or through a fixture of their own; it does nothing for tests
    that do not use the emulator, and imports nothing for them.
    """
    if "abm_emulator_process" not in request.fixturenames:
        return
    # Session-scoped, so already set up (started with this test's options if this test started it).
    process = request.getfixturevalue("abm_emulator_process")
    started = request.config.stash.get(_STARTED, None)
    if started is None or started[0] is not process:
        return  # the user's own abm_emulator_process for these tests: its options are its business
    started_with = started[1]
    seen: dict[str, Any] = request.getfixturevalue("abm_emulator_options")
    if _normalised(seen) != _normalised(started_with):
        pytest.fail(_mismatch_message(request.node.nodeid, seen, started_with), pytrace=False)


def _normalised(options: Mapping[str, Any]) -> list[str]:
    """The emulator's command line for ``options``, flags sorted: what decides how it behaves.

    Comparing command lines rather than dicts makes key order, ``("k",)`` vs ``["k"]``,
    ``api_key="k"`` vs ``api_keys=["k"]``, ``None``/``False`` vs absent and ``port=0`` vs absent
    equal, as they are to the emulator; the order of the values of one flag (the first API key is
    the default one) still counts.
    """
    from abm_emulator.testing import _cli_args

    effective = {"port": 0, "storage_port": 0, **options}
    flags: list[tuple[str, ...]] = []
    for name in sorted(effective):
        if name not in _NOT_EMULATOR_OPTIONS:
            flags.append(tuple(_cli_args({name: effective[name]})))
    return [arg for flag in sorted(flags) for arg in flag]


def _shown(options: Mapping[str, Any]) -> str:
    """``options`` as a dict literal with sorted keys, so two printed sets line up key by key."""
    return "{" + ", ".join(f"{name!r}: {options[name]!r}" for name in sorted(options)) + "}"


def _mismatch_message(nodeid: str, seen: Mapping[str, Any], started_with: Mapping[str, Any]) -> str:
    """Say what went wrong and the two fixes, with an example built from this test's options."""
    kwargs = ", ".join(f"{name}={seen[name]!r}" for name in sorted(seen))
    return (
        "abm_emulator_options override cannot take effect: the session's emulator is already "
        "running with other options.\n"
        f"  this test ({nodeid}) sees:\n      {_shown(seen)}\n"
        f"  the running emulator was started with:\n      {_shown(started_with)}\n"
        "There is one emulator per pytest session (abm_emulator_process), started with the "
        "abm_emulator_options of the first test that uses it; an override that only some tests see "
        "(a sub-directory's conftest.py, a test module) is ignored once it runs. Either:\n"
        "  - put the abm_emulator_options override in the conftest.py at the rootdir / top of your "
        "tests, so the whole session uses it; or\n"
        "  - give these tests their own emulator in a module-scoped fixture (and use it instead of "
        "abm_emulator):\n"
        "\n"
        "        from abm_emulator.testing import start_emulator\n"
        "\n"
        '        @pytest.fixture(scope="module")\n'
        "        def my_emulator():\n"
        f"            with start_emulator({kwargs}) as running:\n"
        "                yield running\n"
    )


@pytest.fixture
def abm_emulator(abm_emulator_process: RunningEmulator, monkeypatch: pytest.MonkeyPatch) -> RunningEmulator:
    """The session's emulator, reset, with the ``abm_default`` connection pointing at it."""
    abm_emulator_process.reset()
    monkeypatch.setenv("AIRFLOW_CONN_ABM_DEFAULT", abm_emulator_process.airflow_connection())
    return abm_emulator_process
