"""``scripts/release.py``: what ``make compat`` installs agrees with the metadata and the docs.

The compat check itself takes minutes and runs in ``make test``'s checks lane; these hold, in the
suite and without the package index, what it checks before it starts and what decides which lanes run.
"""

from __future__ import annotations

import os
import stat
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))  # the scripts import their siblings, as when run

import release  # noqa: E402


def test_the_floor_its_pins_and_its_documented_plain_install_agree() -> None:
    """The declared floor is the one the lowest and the plain targets install, and the plain target's
    pins were resolved from the command docs/compatibility.md prints (edit one, re-pin, or this fails)."""
    assert release.floor_problems() == []
    documented = release.documented_plain_pip()
    assert f"apache-airflow=={release.FLOOR}" in documented
    plain = [t for t in release.TARGETS if t.plain_pip]
    assert [t.airflow for t in plain] == [release.FLOOR]
    assert [t.airflow for t in release.TARGETS if t.lowest] == [release.FLOOR]


def test_a_changed_plain_install_in_the_docs_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "compatibility.md"
    text = release.PLAIN_PIP_PAGE.read_text(encoding="utf-8")
    documented = f'pip install "apache-airflow=={release.FLOOR}" "airflow-provider-abm[duckdb]"\n'
    assert text.count(documented) == 1
    held_back = text.replace(documented, documented.replace("\n", ' "structlog<26"\n'))
    assert held_back != text
    page.write_text(held_back)
    monkeypatch.setattr(release, "PLAIN_PIP_PAGE", page)
    (target,) = [t for t in release.TARGETS if t.plain_pip]
    problems = [p for p in release.plain_pip_problems(target) if "was not resolved from" in p]
    assert len(problems) == 1 and "structlog<26" in problems[0], problems
    assert "structlog<26" in release.resolution_input(target)


def test_every_pins_file_is_a_target_and_every_target_has_one() -> None:
    names = [t.name for t in release.TARGETS]
    assert len(set(names)) == len(names)
    assert {t.pins for t in release.TARGETS} == set(release.PINS.glob("*.txt"))


def test_the_classifiers_name_exactly_the_pythons_make_compat_runs() -> None:
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["classifiers"]
    claimed = {
        c.rsplit(" :: ", 1)[1] for c in classifiers if c.startswith("Programming Language :: Python :: 3.")
    }
    assert claimed == {t.python for t in release.TARGETS}
    newest = [t for t in release.TARGETS if t.airflow == release.NEWEST]
    assert {t.python for t in newest} >= claimed - {"3.11"}  # 3.11 runs the newest in the suite itself


def _executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_python_is_found_in_pyenv_when_the_shim_on_path_does_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyenv's shim for a version that is not the global one fails; the build under versions/ is used."""
    _executable(
        tmp_path / "shims" / "python3.99", 'echo "pyenv: python3.99: command not found" >&2; exit 127'
    )
    _executable(tmp_path / "pyenv" / "versions" / "3.99.1" / "bin" / "python3.99", "echo 3.99")
    newest = _executable(tmp_path / "pyenv" / "versions" / "3.99.2" / "bin" / "python3.99", "echo 3.99")
    _executable(
        tmp_path / "pyenv" / "versions" / "3.99.3t" / "bin" / "python3.99", "echo 3.99"
    )  # free-threaded
    monkeypatch.setenv("PATH", f"{tmp_path / 'shims'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.delenv("PYTHON3_99", raising=False)
    assert release.find_python("3.99") == (str(newest), str(newest))


def test_an_override_wins_and_a_missing_python_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.delenv("PYTHON3_98", raising=False)
    found, where = release.find_python("3.98")
    assert found is None
    assert "$PYTHON3_98" in where and "python3.98 on PATH" in where and str(tmp_path / "pyenv") in where
    chosen = _executable(tmp_path / "elsewhere" / "py", "echo 3.98")
    monkeypatch.setenv("PYTHON3_98", str(chosen))
    assert release.find_python("3.98")[0] == str(chosen)
    wrong = _executable(tmp_path / "elsewhere" / "wrong", "echo 3.97")
    monkeypatch.setenv("PYTHON3_98", str(wrong))
    assert release.find_python("3.98")[0] is None  # an interpreter of another version is not taken


def test_a_lane_without_its_python_is_skipped_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(release, "WORK", tmp_path)
    lane = release.skipped("3.3.2", "airflow-3.3.2-python3.13", "3.13", "no Python 3.13 in ...")
    assert "airflow-3.3.2-python3.13 SKIPPED: no Python 3.13" in capsys.readouterr().out
    assert release.finish([lane]) is True
    table = capsys.readouterr().out
    assert (
        "| 3.3.2 | 3.13 | airflow-3.3.2-python3.13 | tests/smoke | SKIPPED: no Python 3.13 in ... | 0 |"
        in table
    )


def test_the_docs_examples_on_airflows_api_run_on_the_oldest_and_the_newest_lane_only() -> None:
    """They take about a minute a lane; where Airflow's API moves is between the oldest and the newest."""
    running = sorted((Version(t.airflow), Version(t.python)) for t in release.TARGETS if t.doc_examples)
    lanes = [(Version(t.airflow), Version(t.python)) for t in release.TARGETS]
    assert len(running) == 2
    assert running[0][0] == min(lanes)[0], "the oldest Airflow"
    assert running[1] == max(lanes), "the newest Airflow on the newest Python"


def test_the_install_into_a_compat_venv_ignores_this_checkouts_uv_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's pip or uv never sees this repository's ``[tool.uv]`` (its ``override-dependencies``
    keep the dev lock's versions for the cloud emulators): the release and compat venvs, which stand
    in for a user's install, must not either. An override there once made Airflow 3.1.2's own
    ``sqlalchemy`` pin unsatisfiable in the floor lane."""
    assert "override-dependencies" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]
    seen: list[tuple[tuple[str, ...], dict[str, str]]] = []

    def run(*command: object, env: dict[str, str], quiet: bool = False) -> str:
        seen.append((tuple(map(str, command)), env))
        return ""

    monkeypatch.setattr(release, "run", run)
    constraints = tmp_path / "pins.txt"
    constraints.write_text("")
    release.install(tmp_path / "venv", constraints, "pytest")
    pip_commands = [env for command, env in seen if command[1] == "pip"]
    assert pip_commands and all(env.get("UV_NO_CONFIG") == "1" for env in pip_commands)
