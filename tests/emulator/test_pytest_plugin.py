"""The ``abm-emulator`` pytest plugin as a user meets it: a separate pytest run in a fresh directory.

Each case writes a small test tree with ``pytester`` and runs it in a child process, so the plugin is
loaded through its ``pytest11`` entry point (not this repository's ``tests/conftest.py``) and every
run starts its own emulator, exactly as in a user's project.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

# The distinctive first words of the plugin's message for an override that cannot apply.
MISMATCH = "abm_emulator_options override cannot take effect"


@pytest.fixture
def user_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory whose child runs load installed plugins, the way ``pytest`` does."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    return pytester


def run(project: pytest.Pytester) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", "-v")


def test_an_override_in_the_root_conftest_applies_to_the_session(user_project: pytest.Pytester) -> None:
    user_project.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="session")
        def abm_emulator_options():
            return {"api_keys": ["k"], "clock_speed": 2880}
        """
    )
    user_project.makepyfile(
        test_fast="""
        def test_fast_clock(abm_emulator):
            assert abm_emulator.clock()["speed"] == 2880
            assert abm_emulator.api_key == "k"
        """
    )
    result = run(user_project)
    result.assert_outcomes(passed=1)
    assert MISMATCH not in result.stdout.str()


def test_an_override_a_later_module_sees_fails_with_what_to_do(user_project: pytest.Pytester) -> None:
    # "first" is collected before "second": its default options start the session's emulator.
    user_project.mkpydir("first").joinpath("test_default.py").write_text(
        'def test_default_clock(abm_emulator):\n    assert abm_emulator.clock()["speed"] == 1.0\n'
    )
    second = user_project.mkpydir("second")
    second.joinpath("conftest.py").write_text(
        "import pytest\n\n"
        '@pytest.fixture(scope="session")\n'
        "def abm_emulator_options():\n"
        '    return {"clock_speed": 2880, "api_keys": ["k"]}\n'
    )
    second.joinpath("test_fast.py").write_text(
        'def test_fast_clock(abm_emulator):\n    assert abm_emulator.clock()["speed"] == 2880\n'
    )
    result = run(user_project)
    out = result.stdout.str()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*first/test_default.py::test_default_clock PASSED*"])
    result.stdout.fnmatch_lines(["*second/test_fast.py::test_fast_clock ERROR*"])
    assert MISMATCH in out
    # Both option sets, keys sorted, and both ways out with a start_emulator example of these options.
    assert "{'api_keys': ['k'], 'clock_speed': 2880}" in out
    assert "{'api_keys': ['abm-test-key']}" in out
    assert "conftest.py at the rootdir" in out
    assert "start_emulator(api_keys=['k'], clock_speed=2880) as running:" in out
    # It failed at set-up, not in the test body: the silent 1.0 never reached the assert.
    assert "assert 1.0 == 2880" not in out


def test_equal_options_pass_and_direct_process_users_are_checked(user_project: pytest.Pytester) -> None:
    user_project.makeconftest(
        """
        import pytest

        @pytest.fixture(scope="session")
        def abm_emulator_options():
            return {"api_keys": ["k", "j"], "clock_speed": 60}
        """
    )
    user_project.makepyfile(
        test_1_root="""
        def test_root(abm_emulator):
            assert abm_emulator.clock()["speed"] == 60
        """,
        # The same options in another order and form (a tuple, an explicit None) are no override.
        test_2_same="""
        import pytest

        @pytest.fixture(scope="session")
        def abm_emulator_options():
            return {"clock_speed": 60, "seed": None, "api_keys": ("k", "j")}

        def test_same(abm_emulator):
            assert abm_emulator.clock()["speed"] == 60
        """,
        # A module-level override, through a session fixture that wraps abm_emulator_process.
        test_3_other="""
        import pytest

        @pytest.fixture(scope="session")
        def abm_emulator_options():
            return {"api_keys": ["j", "k"], "clock_speed": 60}

        @pytest.fixture(scope="session")
        def wrapped(abm_emulator_process):
            return abm_emulator_process

        def test_other(wrapped):
            assert wrapped.api_key == "j"
        """,
    )
    result = run(user_project)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_3_other.py::test_other ERROR*"])
    assert MISMATCH in result.stdout.str()
