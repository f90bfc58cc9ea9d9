"""The two distributions as a user installs them: built wheels, each alone in a fresh virtualenv.

The wheels are built from this tree with ``uv build --all-packages``; each is installed into an empty
virtualenv with only its declared dependencies, taken from the package registry at the versions
``uv.lock`` pins (the lock is a constraint, not an install list, so nothing undeclared comes along).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

import abm_provider

ROOT = Path(__file__).resolve().parents[1]
VERSION = abm_provider.__version__
STDLIB = set(sys.stdlib_module_names)


def _uv() -> str:
    found = ROOT / ".tools" / "bin" / "uv"
    if found.exists():
        return str(found)
    which = shutil.which("uv")
    if which is None:
        pytest.fail("uv is needed to build the wheels: run `make install` first")
    return which


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    _run(_uv(), "build", "--all-packages", "--wheel", "-o", str(out))
    built = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert set(built) == {"airflow_provider_abm", "abm_emulator"}, sorted(built)
    return built


@pytest.fixture(scope="module")
def constraints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every third-party version ``uv.lock`` pins, as a pip constraints file."""
    path = tmp_path_factory.mktemp("lock") / "constraints.txt"
    text = _run(
        _uv(), "export", "--frozen", "--no-hashes", "--no-header", "--no-dev", "--all-extras",
        "--all-packages", "--no-emit-workspace",
    )  # fmt: skip
    path.write_text(text)
    return path


def _fresh_venv(where: Path, wheel: Path, constraints: Path) -> Path:
    """A new virtualenv holding ``wheel`` and what it declares, nothing else; returns its bin folder."""
    _run(_uv(), "venv", "--quiet", "--python", sys.executable, str(where))
    python = where / "bin" / "python"
    _run(_uv(), "pip", "install", "--quiet", "--python", str(python), "-c", str(constraints), str(wheel))
    return where / "bin"


def _importable(python: Path, module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    return subprocess.run([str(python), "-c", probe], timeout=60).returncode == 0


def test_the_provider_wheel_holds_the_provider_and_its_types_only(wheels: dict[str, Path]) -> None:
    names = zipfile.ZipFile(wheels["airflow_provider_abm"]).namelist()
    assert "abm_provider/py.typed" in names
    assert "abm_provider/hooks/abm.py" in names
    assert not [name for name in names if "abm_emulator" in name]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheels["airflow_provider_abm"]).read(entry_points).decode()
    assert "provider_info = abm_provider:get_provider_info" in text
    assert "abm-emulator" not in text


def test_the_emulator_extra_asks_for_this_repositorys_emulator(wheels: dict[str, Path]) -> None:
    emulator = tomllib.loads((ROOT / "emulator" / "pyproject.toml").read_text())["project"]["version"]
    assert wheels["abm_emulator"].name.startswith(f"abm_emulator-{emulator}-")
    assert wheels["airflow_provider_abm"].name.startswith(f"airflow_provider_abm-{VERSION}-")
    metadata = zipfile.ZipFile(wheels["airflow_provider_abm"]).read(
        f"airflow_provider_abm-{VERSION}.dist-info/METADATA"
    )
    assert f"Requires-Dist: abm-emulator=={emulator}; extra == 'emulator'" in metadata.decode()


def test_the_emulator_wheel_has_its_command_and_pytest_plugin(wheels: dict[str, Path]) -> None:
    archive = zipfile.ZipFile(wheels["abm_emulator"])
    names = archive.namelist()
    assert "abm_emulator/py.typed" in names and "abm_emulator/pytest_plugin.py" in names
    assert not [name for name in names if name.startswith("abm_provider")]
    text = archive.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "abm-emulator = abm_emulator.cli:main" in text
    assert re.search(r"\[pytest11\]\s*abm_emulator = abm_emulator\.pytest_plugin", text)


@pytest.mark.slow
def test_the_provider_wheel_alone_imports_every_module_and_registers(
    wheels: dict[str, Path], constraints: Path, tmp_path: Path
) -> None:
    bin_dir = _fresh_venv(tmp_path / "venv", wheels["airflow_provider_abm"], constraints)
    python = bin_dir / "python"
    # Nothing the provider does not import came along: no emulator, no pandas, no warehouse driver.
    for absent in ("abm_emulator", "pandas", "duckdb", "psycopg2"):
        assert not _importable(python, absent), f"{absent} was installed with the provider alone"
    script = (
        "import importlib, json, pkgutil, abm_provider\n"
        "names = [m.name for m in pkgutil.walk_packages(abm_provider.__path__, 'abm_provider.')]\n"
        "failed = {}\n"
        "for name in names:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as err:\n"
        "        failed[name] = repr(err)\n"
        "print(json.dumps({'names': names, 'failed': failed}))\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    env.pop("AIRFLOW__CORE__DAGS_FOLDER", None)
    result = json.loads(_run(str(python), "-c", script, env=env).strip().splitlines()[-1])
    assert result["failed"] == {}
    assert {"abm_provider.warehouse.dialects.duckdb", "abm_provider.hooks.abm"} <= set(result["names"])
    listed = _run(str(bin_dir / "airflow"), "providers", "list", "--output", "json", env=env)
    providers = {row["package_name"]: row for row in json.loads(listed[listed.index("[") :])}
    assert providers["airflow-provider-abm"]["version"] == VERSION


@pytest.fixture
def emulator_alone(
    wheels: dict[str, Path], constraints: Path, tmp_path: Path
) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    bin_dir = _fresh_venv(tmp_path / "venv", wheels["abm_emulator"], constraints)
    process = subprocess.Popen(
        [str(bin_dir / "abm-emulator"), "--api-key", "alone-key", "--port", "0", "--storage-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        yield bin_dir, process
    finally:
        process.terminate()
        process.wait(30)


@pytest.mark.slow
def test_the_emulator_wheel_alone_runs_and_serves(emulator_alone: tuple[Path, subprocess.Popen[str]]) -> None:
    bin_dir, process = emulator_alone
    python = bin_dir / "python"
    assert not _importable(python, "airflow") and not _importable(python, "abm_provider")
    assert "--api-key" in _run(str(bin_dir / "abm-emulator"), "--help")
    assert process.stdout is not None
    printed = []  # the command prints a few lines, then its ready line once it listens
    while not (line := process.stdout.readline()).startswith("ABM_EMULATOR_READY ") and line:
        printed.append(line)
    assert line, f"the emulator exited before it was ready: {printed}"
    base_url = json.loads(line.split(" ", 1)[1])["base_url"]
    answer = requests.post(
        f"{base_url}/accountLists/v2/folders",
        json={"folderName": "alone", "folderAccess": "PUBLIC"},
        headers={"Authorization": "Bearer alone-key"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    listed = requests.get(f"{base_url}/accountLists/v2/folders", auth=("alone-key", ""), timeout=30)
    assert [folder["name"] for folder in listed.json()["folders"]] == ["alone"]


# -- declared dependencies against imports ------------------------------------------------------------


def _imports(package: Path) -> dict[str, set[str]]:
    """Third-party modules imported by ``package``: {"dotted.name": {"top"|"deferred"}}.

    "top" means imported when a module is imported; "deferred" means inside a function or behind a
    try/except, where a missing extra can be reported instead of failing the import.
    """
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Try | ast.If):
                guarded |= {id(child) for child in ast.walk(node) if child is not node}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # A namespace package (``google.cloud``) has no file, so no distribution owns it: its
                # imported submodule (``from google.cloud import bigquery``) names the one that does.
                names = [
                    f"{node.module}.{alias.name}" if _is_namespace(node.module) else node.module
                    for alias in node.names
                ]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in STDLIB and top not in ("__future__", package.name):
                    found.setdefault(name, set()).add("deferred" if id(node) in guarded else "top")
    return found


#: Distributions that ``apache-airflow`` stands for in a requirement.
_AIRFLOW_ITSELF = {"apache-airflow-core", "apache-airflow-task-sdk"}


def _is_namespace(module: str) -> bool:
    """Whether ``module`` is an installed namespace package (no ``__init__``: nothing owns it)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return False
    return spec is not None and spec.origin is None and spec.submodule_search_locations is not None


def _owners() -> dict[Path, str]:
    """Every file of every installed distribution, with the distribution's name."""
    owners: dict[Path, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"].lower().replace("_", "-")
        for file in dist.files or ():
            owners[Path(dist.locate_file(file)).resolve()] = name
    return owners


def _distributions(modules: dict[str, set[str]], owners: dict[Path, str]) -> dict[str, set[str]]:
    """{"distribution": {"top"|"deferred"}} for the modules, by which distribution ships each file.

    A module that is not installed maps to ``?name``.
    """
    result: dict[str, set[str]] = {}
    for name, where in modules.items():
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        origin = spec.origin if spec is not None else None
        if origin is None or origin in ("built-in", "frozen"):
            dist = f"?{name}"
        else:
            dist = owners.get(Path(origin).resolve(), f"?{name}")
        dist = "apache-airflow" if dist in _AIRFLOW_ITSELF else dist
        result.setdefault(dist, set()).update(where)
    return result


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower() for req in requirements}


@pytest.fixture(scope="module")
def owners() -> dict[Path, str]:
    return _owners()


def test_the_provider_declares_exactly_what_it_imports(owners: dict[Path, str]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    extras = set().union(*(_requirement_names(r) for r in project["optional-dependencies"].values()))
    used = _distributions(_imports(ROOT / "src" / "abm_provider"), owners)
    # A MySQL source's own driver is probed for a streaming cursor, never needed where not installed.
    for probed in ("?MySQLdb.cursors", "?pymysql.cursors"):
        used.pop(probed, None)
    on_import = {dist for dist, where in used.items() if "top" in where}
    assert on_import <= declared, f"imported on import but not declared: {sorted(on_import - declared)}"
    # OpenLineage's client and SQL parser, and the MySQL drivers, come with their Airflow providers (extras).
    with_providers = {"openlineage-python", "openlineage-sql", "mysqlclient", "pymysql"}
    assert set(used) - with_providers <= declared | extras, sorted(set(used) - declared - extras)
    assert declared <= set(used), f"declared but never imported: {sorted(declared - set(used))}"
    assert not {"pandas", "numpy"} & declared


def test_the_emulator_declares_exactly_what_it_imports(owners: dict[Path, str]) -> None:
    project = tomllib.loads((ROOT / "emulator" / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    used = set(_distributions(_imports(ROOT / "emulator" / "src" / "abm_emulator"), owners))
    assert not {"airflow-provider-abm", "apache-airflow"} & used
    # pytest hosts the pytest plugin module; it is never imported outside a pytest run.
    used.discard("pytest")
    assert used == declared, (
        f"imported, not declared: {sorted(used - declared)}; "
        f"declared, not imported: {sorted(declared - used)}"
    )
