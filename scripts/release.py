"""Release checks: build both distributions, check them, and run them on every Airflow the metadata claims.

    python scripts/release.py check          # make release-check
    python scripts/release.py compat         # make compat
    python scripts/release.py check compat   # both; their smoke runs go side by side (make test)
    python scripts/release.py pin            # re-resolve release/pins/ (needs the package index)
    python scripts/release.py contents       # rewrite release/contents/ from a fresh build

``check`` builds the wheels and sdists of ``airflow-provider-abm`` and ``abm-emulator``, runs
``twine check --strict`` on them, compares each one's file list with ``release/contents/``, then installs
both from the built sdists alone into a fresh venv (third-party versions from ``uv.lock``) and runs the
smoke subset (``tests/smoke``).

``compat`` installs the built wheels, with every extra, into one fresh venv per file of ``release/pins/``:
the Airflow floor twice (every direct dependency at its declared lower bound; and the plain ``pip
install`` that docs/compatibility.md prints), the newest 3.1 and the newest 3.2 on Python 3.11, and the
newest Airflow on Python 3.12 and 3.13. The lowest, 3.1 and 3.2 files are resolved as of the day after
their Airflow release, which is what Airflow's constraint files hold and what a user who installed then
got (the constraint files themselves cannot be fetched on the machines CI runs on); the plain installs
as of a recent day, what a user gets now. It fails when a declared lower bound is not what the floor
venv installs, so the bounds in both ``pyproject.toml`` files are the versions that were run, and when
the documented plain install is not the one its pins were resolved from. A Python that is not on the
machine (see ``find_python``) skips its lanes, saying so in the table.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
UV = ROOT / ".tools" / "bin" / "uv"
TWINE = ROOT / ".venv" / "bin" / "twine"
WORK = ROOT / ".release"  # built files, venvs and logs; not committed
PINS = ROOT / "release" / "pins"
CONTENTS = ROOT / "release" / "contents"
PYTHON = os.environ.get("PYTHON", "python3.11")
#: What the smoke subset needs beside the two distributions.
TEST_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout")
#: The provider's extras that the compat and release venvs install (the emulator extra is the local wheel
#: itself). ``mysql`` brings mysqlclient, which builds from source against MariaDB Connector/C
#: (Debian's libmariadb-dev; ``make install`` installs it on a fresh machine).
EXTRAS = "duckdb,postgres,mysql,openlineage,celery"
#: Published after the Airflow floor, yet what the DuckDB extra needs: exempt from that target's cutoff.
LATER_THAN_THE_FLOOR = ("apache-airflow-providers-duckdb", "apache-airflow-providers-common-sql")
#: The page whose marked block is the plain ``pip install`` of the floor that ``make compat`` runs.
PLAIN_PIP_PAGE = ROOT / "docs" / "compatibility.md"
PLAIN_PIP_MARK = "<!-- make compat: the plain pip install of the floor -->"
SMOKE_TIMEOUT = 900
#: Set for the smoke runs that also run the docs' examples on Airflow's API.
DOC_EXAMPLES_ENV = "ABM_SMOKE_DOC_EXAMPLES"


@dataclass(frozen=True)
class Target:
    """One Airflow release, on one Python, that the compat check installs."""

    airflow: str
    cutoff: str  # resolve with what was published before this day, as that release's constraints did
    python: str = "3.11"
    lowest: bool = False  # every direct dependency at its lowest allowed version
    plain_pip: bool = False  # only what the documented plain `pip install` says, nothing held back
    exempt: tuple[str, ...] = ("apache-airflow-providers-duckdb",)  # published later, needed anyway
    #: Also run the docs' examples on Airflow's own API (tests/smoke/test_doc_examples.py, about a
    #: minute): on the oldest and the newest lane, where an API that moved would break them.
    doc_examples: bool = False

    @property
    def name(self) -> str:
        kind = "-lowest" if self.lowest else "-pip" if self.plain_pip else ""
        python = "" if self.python == "3.11" else f"-python{self.python}"
        return f"airflow-{self.airflow}{kind}{python}"

    @property
    def pins(self) -> Path:
        return PINS / f"{self.name}.txt"


#: The lowest Airflow the provider declares (``apache-airflow>=`` in pyproject.toml): the first 3.1 that a
#: plain ``pip install`` runs. 3.1.0 and 3.1.1 leave structlog unbounded, and 25.5 dropped the
#: ``structlog.dev.Styles`` their logging imports; 3.1.0 leaves universal-pathlib unbounded too, and 0.3
#: refuses its ``ObjectStoragePath("file://...")`` (docs/compatibility.md).
FLOOR = "3.1.2"
NEWEST = "3.3.2"  # the newest Airflow: what uv.lock pins and the whole suite runs
#: The plain installs (the floor's as the docs print it; the newest Airflow's on the newer Pythons) take
#: what the package index held on this day: what a user gets now, not what the constraints file held.
RECENT = "2026-11-27"
TARGETS = (
    Target(FLOOR, "2025-11-06", lowest=True, exempt=LATER_THAN_THE_FLOOR),
    Target(FLOOR, RECENT, plain_pip=True, exempt=(), doc_examples=True),
    Target("3.1.8", "2026-03-12"),
    Target("3.2.2", "2026-05-30"),
    Target(NEWEST, RECENT, python="3.12", exempt=()),
    Target(NEWEST, RECENT, python="3.13", exempt=(), doc_examples=True),
)


def run(*args: str | Path, env: dict[str, str] | None = None, quiet: bool = False) -> str:
    """Run a command from the repository root; on failure, print what it said and stop."""
    done = subprocess.run([str(a) for a in args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(map(str, args))}\n{done.stdout}\n{done.stderr}")
    if not quiet and done.stderr.strip():
        print(done.stderr.strip())
    return done.stdout


def phase(what: str, began: float) -> None:
    print(f"{what}: {time.monotonic() - began:.1f} s", flush=True)


def uv_env(*, project_config: bool = True) -> dict[str, str]:
    """uv's settings as the Makefile gives them, when this script runs on its own.

    ``project_config=False`` for what stands in for a user's install (the pins' resolution, the
    release and compat venvs): uv would otherwise apply this checkout's ``[tool.uv]`` settings to
    them, such as the dev lock's ``override-dependencies``, which no user's pip or uv sees.
    """
    env = dict(os.environ)
    env.setdefault("UV_LINK_MODE", "copy")
    env.setdefault("UV_COMPILE_BYTECODE", "1")
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
    if not project_config:
        env["UV_NO_CONFIG"] = "1"
    return env


# -- requirements ---------------------------------------------------------------------------------------


def project(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def requirement_name(requirement: str) -> str:
    """The normalised distribution name of a requirement line (``name==1.0`` in a pins file, too)."""
    return canonicalize_name(Requirement(requirement).name)


def distribution_requirements() -> list[str]:
    """Everything both distributions declare, every extra included."""
    provider = project(ROOT / "pyproject.toml")["project"]
    emulator = project(ROOT / "emulator" / "pyproject.toml")["project"]
    wanted = list(provider["dependencies"])
    for extra, requirements in provider["optional-dependencies"].items():
        if extra != "emulator":  # this repository's own emulator, installed from its wheel
            wanted += requirements
    wanted += emulator["dependencies"]
    for requirements in emulator.get("optional-dependencies", {}).values():
        wanted += requirements
    return wanted


def direct_requirements() -> list[str]:
    """What both distributions declare, plus the smoke subset's tools from the dev group."""
    dev = project(ROOT / "pyproject.toml")["dependency-groups"]["dev"]
    wanted = distribution_requirements() + [r for r in dev if requirement_name(r) in TEST_TOOLS]
    return sorted(set(wanted), key=str.lower)


def declared_floors() -> dict[str, str]:
    """{distribution: lower bound} of every ``>=`` both distributions declare."""
    floors: dict[str, str] = {}
    for line in distribution_requirements():
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                floors[canonicalize_name(requirement.name)] = spec.version
    return floors


def pinned(path: Path) -> dict[str, str]:
    """{distribution: version} of a pins file."""
    versions = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            requirement = Requirement(line.split("#", 1)[0].strip())
            (spec,) = requirement.specifier
            versions[canonicalize_name(requirement.name)] = spec.version
    return versions


def floor_mismatches(target: Target) -> list[str]:
    """Declared lower bounds that the floor venv does not install as they are written."""
    versions = pinned(target.pins)
    return [
        f"{name}>={floor} is declared, but the Airflow {target.airflow} floor installs {versions.get(name)}"
        for name, floor in sorted(declared_floors().items())
        if name in versions and Version(versions[name]) != Version(floor)
    ]


def shown(path: Path) -> Path:
    """A path as messages name it: from the repository's root when it is inside."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


#: The provider's own names: in a documented command, the provider; in pins, never (it is the built wheel).
OWN = {canonicalize_name("airflow-provider-abm"), canonicalize_name("abm-emulator")}


def documented_plain_pip() -> list[str]:
    """The requirements of the plain ``pip install`` of the floor that ``PLAIN_PIP_PAGE`` prints.

    It is the first ``bash`` block after ``PLAIN_PIP_MARK``: one ``pip install`` of requirements, no
    options (a constraints file or an index would not be a plain install).
    """
    page = PLAIN_PIP_PAGE
    lines = page.read_text(encoding="utf-8").splitlines()
    if PLAIN_PIP_MARK not in lines:
        sys.exit(f"{shown(page)} has no line {PLAIN_PIP_MARK!r} above the floor's pip install")
    start = next(i for i in range(lines.index(PLAIN_PIP_MARK), len(lines)) if lines[i].startswith("```bash"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    words = shlex.split("\n".join(lines[start + 1 : end]).replace("\\\n", " "), comments=True)
    if words[:2] != ["pip", "install"] or any(w.startswith("-") for w in words[2:]) or len(words) < 3:
        sys.exit(f"{shown(page)}:{start + 1}: not one plain `pip install REQUIREMENT...`: {words}")
    return words[2:]


def plain_pip_command(requirements: Sequence[str]) -> str:
    return shlex.join(["pip", "install", *requirements])


def resolution_input(target: Target) -> list[str]:
    """What a target's pins are resolved from: its Airflow, and everything both distributions declare
    (every extra) with the smoke subset's tools; for the plain install, what the docs' command adds too."""
    if not target.plain_pip:
        return [f"apache-airflow=={target.airflow}", *direct_requirements()]
    documented = [r for r in documented_plain_pip() if requirement_name(r) not in OWN]
    return [*documented, *direct_requirements()]


def plain_pip_problems(target: Target) -> list[str]:
    """Where the documented plain install, the declared floor and the plain target's pins disagree."""
    page = shown(PLAIN_PIP_PAGE)
    documented = documented_plain_pip()
    command = plain_pip_command(documented)
    problems = []
    if f"apache-airflow=={target.airflow}" not in documented:
        problems.append(f"{page} installs {command!r}, not apache-airflow=={target.airflow}, the floor")
    if not any(requirement_name(r) == "airflow-provider-abm" for r in documented):
        problems.append(f"{page}'s plain install ({command!r}) does not install airflow-provider-abm")
    header = [line for line in target.pins.read_text().splitlines() if line.startswith("#")]
    if f"# {command}" not in header:
        problems.append(
            f"{shown(target.pins)} was not resolved from {page}'s plain install, {command!r}:"
            " run python scripts/release.py pin"
        )
    return problems


def floor_problems() -> list[str]:
    """What ``make compat`` refuses to start with: a declared floor that is not FLOOR, lower bounds the
    lowest target does not install, a documented plain install its pins were not resolved from."""
    declared = declared_floors()["apache-airflow"]
    problems = []
    if Version(declared) != Version(FLOOR):
        problems.append(
            f"pyproject.toml declares apache-airflow>={declared}; FLOOR (scripts/release.py) is {FLOOR}"
        )
    for target in TARGETS:
        problems += floor_mismatches(target) if target.lowest else []
        problems += plain_pip_problems(target) if target.plain_pip else []
    return problems


def pins_header(target: Target) -> str:
    lines = [f"Airflow {target.airflow} on Python {target.python} for `make compat`, as of {target.cutoff}:"]
    if target.lowest:
        lines.append("every direct dependency at its lowest allowed version.")
    if target.plain_pip:
        lines += [
            f"the plain pip install that {shown(PLAIN_PIP_PAGE)} prints (with every extra, the",
            "emulator and the smoke subset's tools added; nothing else held back):",
            plain_pip_command(documented_plain_pip()),
        ]
    if target.exempt:
        lines.append(f"Published later, needed anyway: {', '.join(target.exempt)}.")
    lines.append("Regenerate with: python scripts/release.py pin")
    return "".join(f"# {line}\n" for line in lines)


def pin(targets: Sequence[Target]) -> None:
    """Resolve each target's pins from the package index, as of the target's cutoff, for its Python."""
    PINS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        wanted = Path(scratch) / "requirements.in"
        for target in targets:
            wanted.write_text("\n".join(resolution_input(target)) + "\n")
            later = [f"--exclude-newer-package={name}=2100-01-01" for name in target.exempt]
            resolution = ["--resolution=lowest-direct"] if target.lowest else []
            out = Path(scratch) / f"{target.name}.txt"  # uv prefers what an existing output pins
            run(
                UV, "pip", "compile", "--quiet", "--no-header", "--python-version", target.python,
                "--exclude-newer", target.cutoff, *later, *resolution, wanted, "-o", out,
                env=uv_env(project_config=False),
            )  # fmt: skip
            # uv names the input by its path, a fresh temporary folder each time: keep the files' diffs
            # to what changed.
            text = out.read_text().replace(str(wanted), wanted.name)
            target.pins.write_text(pins_header(target) + text)
            print(f"wrote {target.pins.relative_to(ROOT)}")


# -- the built files ------------------------------------------------------------------------------------


def build() -> list[Path]:
    """Both distributions' wheels and sdists, built afresh into .release/dist."""
    dist = WORK / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    run(UV, "build", "--quiet", "--all-packages", "-o", dist, env=uv_env())
    built = sorted(p for p in dist.iterdir() if p.name.endswith((".whl", ".tar.gz")))
    kinds = sorted((distribution(p), kind(p)) for p in built)
    expected = sorted((d, k) for d in ("abm_emulator", "airflow_provider_abm") for k in ("sdist", "wheel"))
    if kinds != expected:
        sys.exit(f"the build made {[p.name for p in built]}, not a wheel and an sdist of each distribution")
    return built


def distribution(path: Path) -> str:
    return path.name.split("-")[0]


def kind(path: Path) -> str:
    return "wheel" if path.suffix == ".whl" else "sdist"


def version_of(path: Path) -> str:
    return path.name.split("-")[1].removesuffix(".tar.gz")


def listing(path: Path) -> list[str]:
    """The files an archive holds, with its version written ``{version}`` so the lists survive a bump."""
    if kind(path) == "wheel":
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    else:
        with tarfile.open(path) as archive:
            names = [m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile()]
    return sorted(name.replace(version_of(path), "{version}") for name in names)


def contents_file(path: Path) -> Path:
    return CONTENTS / f"{distribution(path)}-{kind(path)}.txt"


def write_contents(built: Iterable[Path]) -> None:
    CONTENTS.mkdir(parents=True, exist_ok=True)
    for path in built:
        contents_file(path).write_text("\n".join(listing(path)) + "\n")
        print(f"wrote {contents_file(path).relative_to(ROOT)}")


def check_contents(built: Iterable[Path]) -> None:
    """Each archive holds exactly the expected files: nothing missing, nothing that should stay home."""
    problems = []
    for path in built:
        expected = set(contents_file(path).read_text().split())
        actual = set(listing(path))
        if actual != expected:
            problems.append(
                f"{path.name} differs from {contents_file(path).relative_to(ROOT)}:\n"
                f"  missing: {sorted(expected - actual)}\n  unexpected: {sorted(actual - expected)}"
            )
        else:
            print(f"{path.name}: {len(actual)} files, as listed")
    if problems:
        sys.exit("\n".join(problems) + "\nIf the change is meant, run: python scripts/release.py contents")


def twine_check(built: Sequence[Path]) -> None:
    print(run(TWINE, "check", "--strict", *built).strip())


# -- venvs and the smoke subset -------------------------------------------------------------------------


def find_python(version: str) -> tuple[str | None, str]:
    """An interpreter of ``version`` (``"3.12"``) and where it was found; or None and where it was sought.

    In order: ``$PYTHON3_12`` (for 3.11 also ``$PYTHON``, which the Makefile sets), ``python3.12`` on
    PATH, then pyenv's builds, ``$PYENV_ROOT/versions/3.12.*/bin/python3.12`` (``~/.pyenv`` by
    default), newest first: every developer machine and CI runner of this project has 3.11, 3.12 and
    3.13 there, while pyenv's shims on PATH run only the global version (3.11) and fail for the others.
    Each candidate must run and say it is ``version``.
    """
    override = f"PYTHON{version.replace('.', '_')}"
    candidates = [os.environ.get(override, "")]
    if version == "3.11":
        candidates.append(PYTHON)
    candidates.append(f"python{version}")
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    builds = []
    for build in pyenv.glob(f"versions/{version}.*/bin/python{version}"):
        try:
            builds.append((Version(build.parents[1].name), build))
        except InvalidVersion:  # 3.13.0t (free-threaded), 3.13-dev: not a release
            continue
    candidates += [str(build) for _, build in sorted(builds, reverse=True)]
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    for candidate in filter(None, candidates):
        found = shutil.which(candidate)
        if found is None:
            continue
        try:
            said = subprocess.run([found, "-c", probe], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if said.returncode == 0 and said.stdout.strip() == version:
            return found, f"${override}" if candidate == candidates[0] else candidate
    return None, f"${override}, python{version} on PATH, {pyenv}/versions/{version}.*"


def fresh_venv(name: str, python: str = PYTHON) -> Path:
    where = WORK / "venvs" / name
    shutil.rmtree(where, ignore_errors=True)
    run(UV, "venv", "--quiet", "--python", python, where, env=uv_env())
    return where


def install(venv: Path, constraints: Path, *requirements: str) -> None:
    """Install with every version fixed by ``constraints``; fail if anything unpinned came along.

    Without compiling bytecode: these venvs run once, and the smoke subset imports a fraction of what
    they hold, so Python compiling what it imports costs far less than uv compiling everything
    (docs/compatibility.md has the figures).
    """
    python = venv / "bin" / "python"
    env = {**uv_env(project_config=False), "UV_COMPILE_BYTECODE": "0"}
    run(UV, "pip", "install", "--quiet", "--python", python, "-c", constraints, *requirements, env=env)
    allowed = pinned(constraints)
    frozen = run(UV, "pip", "freeze", "--python", python, env=uv_env(project_config=False), quiet=True)
    loose = [
        line
        for line in frozen.splitlines()
        if "==" in line and requirement_name(line) not in allowed  # the local files are "name @ file:..."
    ]
    if loose:
        sys.exit(f"{venv.name}: installed without a pin in {constraints.name}: {loose}")


def wheel_requirements(built: Sequence[Path], want: str) -> list[str]:
    """The provider (every extra) and the emulator (its pytest extra) from the built ``want`` files."""
    files = {distribution(p): p for p in built if kind(p) == want}
    return [
        f"airflow-provider-abm[{EXTRAS}] @ {files['airflow_provider_abm'].as_uri()}",
        f"abm-emulator[pytest] @ {files['abm_emulator'].as_uri()}",
        *TEST_TOOLS,
    ]


def lock_constraints() -> Path:
    """Every version ``uv.lock`` pins (the dev group too), as a constraints file."""
    path = WORK / "uv-lock-constraints.txt"
    text = run(
        UV, "export", "--frozen", "--no-hashes", "--no-header", "--all-extras", "--all-packages",
        "--no-emit-workspace", env=uv_env(), quiet=True,
    )  # fmt: skip
    path.write_text(text)
    return path


@dataclass
class Smoke:
    """One venv's run of the smoke subset."""

    label: str
    venv: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    seconds: float = 0.0
    summary: str = ""
    ok: bool = False
    python: str = ""


def skipped(label: str, name: str, python: str, why: str) -> Smoke:
    """A lane that cannot run on this machine: it passes, and the table says it was skipped and why."""
    print(f"!!! {name} SKIPPED: {why}", flush=True)
    return Smoke(label, WORK / "venvs" / name, WORK / "logs" / f"{name}.log", summary=f"SKIPPED: {why}",
                 ok=True, python=python)  # fmt: skip


def start_smoke(label: str, venv: Path, python: str = "3.11", *, doc_examples: bool = False) -> Smoke:
    """Run tests/smoke with the venv's Python alone: no repository conftest, no inherited Airflow settings.

    ``doc_examples``: the docs' examples on Airflow's API run too (``ABM_SMOKE_DOC_EXAMPLES``).
    """
    log = WORK / "logs" / f"{venv.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ABM_", "PYTEST", "PYTHONPATH"))
    }
    env["ABM_SMOKE_EXPECT_SITE_PACKAGES"] = str(venv)
    # The venvs hold no bytecode (``install``): let the first process that imports a module write it,
    # or every later process of the run (the docs' examples, ``airflow dags reserialize``) compiles
    # Airflow again where the environment says PYTHONDONTWRITEBYTECODE.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if doc_examples:
        env[DOC_EXAMPLES_ENV] = "1"
    smoke = Smoke(label, venv, log, started=time.monotonic(), python=python)
    smoke.process = subprocess.Popen(
        [venv / "bin" / "python", "-m", "pytest", "-p", "no:cacheprovider", "--confcutdir", "tests/smoke",
         "-q", "-rfEs", f"--timeout={SMOKE_TIMEOUT}", "tests/smoke"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    return smoke


def finish(smokes: Sequence[Smoke]) -> bool:
    """Wait for every smoke run, noting when each ended; print the table, and the logs of failures."""
    running = [smoke for smoke in smokes if smoke.process is not None]
    while running:
        for smoke in list(running):
            assert smoke.process is not None
            code = smoke.process.poll()
            if code is None:
                continue
            running.remove(smoke)
            smoke.ok = code == 0
            smoke.seconds = time.monotonic() - smoke.started
            lines = smoke.log.read_text(errors="replace").strip().splitlines()
            smoke.summary = lines[-1].strip("= ") if lines else "no output"
        time.sleep(0.2)
    print("\n| Airflow | Python | venv | smoke subset | result | seconds |\n|---|---|---|---|---|---|")
    for smoke in smokes:
        print(
            f"| {smoke.label} | {smoke.python} | {smoke.venv.name} | tests/smoke | {smoke.summary}"
            f" | {smoke.seconds:.0f} |"
        )
    failed = [s for s in smokes if not s.ok]
    for smoke in failed:
        print(f"\n--- {smoke.venv.name} failed; its log, {smoke.log.relative_to(ROOT)}, ends:")
        print("\n".join(smoke.log.read_text(errors="replace").splitlines()[-60:]))
    return not failed


def airflow_version(venv: Path) -> str:
    probe = "import importlib.metadata as m; print(m.version('apache-airflow'))"
    return run(venv / "bin" / "python", "-c", probe, quiet=True).strip()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("commands", nargs="+", choices=("check", "compat", "pin", "contents"))
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="compat and pin: only the targets whose pins file "
        "name contains NAME (e.g. python3.13, 3.1.2-pip); repeatable",
    )  # fmt: skip
    options = parser.parse_args(argv)
    commands = options.commands
    targets = [t for t in TARGETS if not options.only or any(n in t.name for n in options.only)]
    if not targets:
        sys.exit(f"no target matches {options.only}: {[t.name for t in TARGETS]}")
    if "pin" in commands:
        pin(targets)
    if not {"check", "compat", "contents"} & set(commands):
        return
    began = time.monotonic()
    built = build()
    phase("built", began)
    if "contents" in commands:
        write_contents(built)
    smokes: list[Smoke] = []
    if "check" in commands:
        twine_check(built)
        check_contents(built)
        venv = fresh_venv("release")
        install(venv, lock_constraints(), *wheel_requirements(built, "sdist"))
        phase("release venv installed", began)
        smokes.append(start_smoke(f"{airflow_version(venv)} (uv.lock, from the sdists)", venv))
    if "compat" in commands:
        problems = floor_problems()
        if problems:
            sys.exit("the floor, its pins and its documented install disagree:\n  " + "\n  ".join(problems))
        pythons = {version: find_python(version) for version in sorted({t.python for t in targets})}
        for version, (found, where) in pythons.items():
            print(
                f"Python {version}: {found} (from {where})" if found else f"Python {version}: none in {where}"
            )
        for target in targets:
            found, where = pythons[target.python]
            if found is None:
                why = f"no Python {target.python} in {where} (`pyenv install {target.python}` adds it)"
                smokes.append(skipped(target.airflow, target.name, target.python, why))
                continue
            venv = fresh_venv(target.name, found)
            install(venv, target.pins, *wheel_requirements(built, "wheel"))
            phase(f"{venv.name} installed", began)
            smokes.append(
                start_smoke(airflow_version(venv), venv, target.python, doc_examples=target.doc_examples)
            )
    ok = finish(smokes) if smokes else True
    print(
        f"\n{' and '.join(c for c in commands if c in ('check', 'compat'))}: {time.monotonic() - began:.0f} s"
    )
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
