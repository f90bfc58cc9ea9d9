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
Airflow 3.1.0 with every direct dependency at its declared lower bound, the newest 3.1 and the newest
3.2. Each file is resolved as of the day after that Airflow release, which is what Airflow's constraint
files hold and what a user who installed then got; the constraint files themselves cannot be fetched
on the machines CI runs on. It fails when a declared lower bound is not what the floor venv installs,
so the bounds in both ``pyproject.toml`` files are the versions that were run.
"""

from __future__ import annotations

import argparse
import os
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
from packaging.version import Version

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
#: Published after Airflow 3.1.0, yet what the DuckDB extra needs: exempt from that target's cutoff.
LATER_THAN_THE_FLOOR = ("apache-airflow-providers-duckdb", "apache-airflow-providers-common-sql")
SMOKE_TIMEOUT = 900


@dataclass(frozen=True)
class Target:
    """One Airflow release the compat check installs."""

    airflow: str
    cutoff: str  # resolve with what was published before this day, as that release's constraints did
    lowest: bool = False  # every direct dependency at its lowest allowed version
    exempt: tuple[str, ...] = ("apache-airflow-providers-duckdb",)  # published later, needed anyway

    @property
    def name(self) -> str:
        return f"airflow-{self.airflow}"

    @property
    def pins(self) -> Path:
        return PINS / f"{self.name}.txt"


TARGETS = (
    Target("3.1.0", "2025-09-26", lowest=True, exempt=LATER_THAN_THE_FLOOR),
    Target("3.1.8", "2026-03-12"),
    Target("3.2.2", "2026-05-30"),
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


def uv_env() -> dict[str, str]:
    """uv's settings as the Makefile gives them, when this script runs on its own."""
    env = dict(os.environ)
    env.setdefault("UV_LINK_MODE", "copy")
    env.setdefault("UV_COMPILE_BYTECODE", "1")
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
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


def pin(targets: Sequence[Target]) -> None:
    """Resolve each target's pins from the package index, as of the target's cutoff."""
    PINS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        wanted = Path(scratch) / "requirements.in"
        for target in targets:
            wanted.write_text("\n".join([f"apache-airflow=={target.airflow}", *direct_requirements()]) + "\n")
            later = [f"--exclude-newer-package={name}=2100-01-01" for name in target.exempt]
            resolution = ["--resolution=lowest-direct"] if target.lowest else []
            out = Path(scratch) / f"{target.name}.txt"  # uv prefers what an existing output pins
            run(
                UV, "pip", "compile", "--quiet", "--no-header", "--python-version", "3.11",
                "--exclude-newer", target.cutoff, *later, *resolution, wanted, "-o", out,
                env=uv_env(),
            )  # fmt: skip
            # uv names the input by its path, a fresh temporary folder each time: keep the files' diffs
            # to what changed.
            text = out.read_text().replace(str(wanted), wanted.name)
            how = "every direct dependency at its lowest allowed version, " if target.lowest else ""
            header = (
                f"# Airflow {target.airflow} for `make compat`: {how}resolved as of {target.cutoff}\n"
                f"# (published later, needed anyway: {', '.join(target.exempt)}).\n"
                "# Regenerate with: python scripts/release.py pin\n"
            )
            target.pins.write_text(header + text)
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


def fresh_venv(name: str) -> Path:
    where = WORK / "venvs" / name
    shutil.rmtree(where, ignore_errors=True)
    run(UV, "venv", "--quiet", "--python", PYTHON, where, env=uv_env())
    return where


def install(venv: Path, constraints: Path, *requirements: str) -> None:
    """Install with every version fixed by ``constraints``; fail if anything unpinned came along."""
    python = venv / "bin" / "python"
    run(UV, "pip", "install", "--quiet", "--python", python, "-c", constraints, *requirements, env=uv_env())
    allowed = pinned(constraints)
    frozen = run(UV, "pip", "freeze", "--python", python, env=uv_env(), quiet=True)
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


def start_smoke(label: str, venv: Path) -> Smoke:
    """Run tests/smoke with the venv's Python alone: no repository conftest, no inherited Airflow settings."""
    log = WORK / "logs" / f"{venv.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ABM_", "PYTEST", "PYTHONPATH"))
    }
    env["ABM_SMOKE_EXPECT_SITE_PACKAGES"] = str(venv)
    smoke = Smoke(label, venv, log, started=time.monotonic())
    smoke.process = subprocess.Popen(
        [venv / "bin" / "python", "-m", "pytest", "-p", "no:cacheprovider", "--confcutdir", "tests/smoke",
         "-q", "-rfEs", f"--timeout={SMOKE_TIMEOUT}", "tests/smoke"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    return smoke


def finish(smokes: Sequence[Smoke]) -> bool:
    """Wait for every smoke run, noting when each ended; print the table, and the logs of failures."""
    running = list(smokes)
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
    print("\n| Airflow | venv | smoke subset | result | seconds |\n|---|---|---|---|---|")
    for smoke in smokes:
        print(f"| {smoke.label} | {smoke.venv.name} | tests/smoke | {smoke.summary} | {smoke.seconds:.0f} |")
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
    commands = parser.parse_args(argv).commands
    if "pin" in commands:
        pin(TARGETS)
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
        problems = [problem for target in TARGETS if target.lowest for problem in floor_mismatches(target)]
        if problems:
            sys.exit("lower bounds that the floor venv does not install:\n  " + "\n  ".join(problems))
        for target in TARGETS:
            venv = fresh_venv(target.name)
            install(venv, target.pins, *wheel_requirements(built, "wheel"))
            phase(f"{venv.name} installed", began)
            smokes.append(start_smoke(airflow_version(venv), venv))
    ok = finish(smokes) if smokes else True
    print(
        f"\n{' and '.join(c for c in commands if c in ('check', 'compat'))}: {time.monotonic() - began:.0f} s"
    )
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
