"""The compose stack cannot be started here (no Docker engine), so its consistency is checked instead."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.warehouses import postgres_dsn, require_postgres

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "docker-compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def locked_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions = {p["version"] for p in lock["package"] if p["name"] == package}
    assert len(versions) == 1, f"{package} is locked at {versions}"
    return versions.pop()


def dag_env_defaults() -> dict[str, str]:
    """Each ``ABM_*`` variable the example DAGs read, with its default (``os.environ.get(NAME, default)``)."""
    defaults: dict[str, str] = {}
    for path in (ROOT / "dags").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[1], ast.Constant)
            ):
                defaults[str(node.args[0].value)] = str(node.args[1].value)
    return defaults


def dag_connection_ids() -> set[str]:
    """Connection ids the example DAGs use by default."""
    return {value for name, value in dag_env_defaults().items() if name.endswith("_CONN_ID")}


def test_every_depends_on_names_a_service(compose: dict[str, Any]) -> None:
    services = set(compose["services"])
    for name, service in compose["services"].items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            assert dependency != name


def test_every_service_has_a_health_check(compose: dict[str, Any]) -> None:
    missing = [name for name, service in compose["services"].items() if "healthcheck" not in service]
    assert missing == []


def test_the_topology_is_the_celery_one(compose: dict[str, Any]) -> None:
    services = set(compose["services"])
    expected = {
        "postgres",
        "redis",
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-worker",
        "abm-emulator",
    }
    assert expected <= services
    env = compose["services"]["airflow-worker"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
    # A worker must be scalable: no fixed container name or host port.
    worker = compose["services"]["airflow-worker"]
    assert "container_name" not in worker and "ports" not in worker


def test_image_airflow_version_is_the_locked_one(compose: dict[str, Any]) -> None:
    locked = locked_version("apache-airflow")
    match = re.search(r"^ARG AIRFLOW_VERSION=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert match and match.group(1) == locked
    assert "FROM apache/airflow:${AIRFLOW_VERSION}" in DOCKERFILE.read_text()
    for name, service in compose["services"].items():
        args = (service.get("build") or {}).get("args") or {}
        if "AIRFLOW_VERSION" in args:
            assert str(args["AIRFLOW_VERSION"]) == locked, name
        image = service.get("image", "")
        if image.startswith("airflow-provider-abm:"):
            assert image.endswith(f":{locked}"), name


def test_connections_match_the_dags(compose: dict[str, Any]) -> None:
    env = compose["services"]["airflow-scheduler"]["environment"]
    defined = {key.removeprefix("AIRFLOW_CONN_").lower() for key in env if key.startswith("AIRFLOW_CONN_")}
    used = dag_connection_ids()
    assert used, "no connection ids found in dags/"
    assert used <= defined, f"DAGs use {sorted(used - defined)} which the compose file does not define"
    for service in ("airflow-worker", "airflow-triggerer", "airflow-dag-processor"):
        worker_env = compose["services"][service]["environment"]
        assert {k for k in worker_env if k.startswith("AIRFLOW_CONN_")} >= {
            k for k in env if k.startswith("AIRFLOW_CONN_")
        }


def substitute(text: str) -> str:
    """Compose interpolation as ``docker compose`` does with an empty environment: ``${X:-d}`` -> d."""
    text = re.sub(r"(?<!\$)\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}", r"\1", text)
    return text.replace("$$", "$")


def test_the_emulator_command_parses_with_the_cli(compose: dict[str, Any]) -> None:
    """Every flag the service passes exists in ``abm-emulator`` and its values pass the CLI's checks."""
    from abm_emulator.cli import build_parser

    command = shlex.split(substitute(compose["services"]["abm-emulator"]["command"]))
    assert command[0] == "abm-emulator"
    parser = build_parser()
    known = {option for action in parser._actions for option in action.option_strings}
    flags = [word for word in command[1:] if word.startswith("--")]
    assert set(flags) <= known, f"unknown flags {sorted(set(flags) - known)}"
    args = parser.parse_args(command[1:])
    assert args.host == "0.0.0.0" and args.public_host == "abm-emulator"
    # Download links live in emulated seconds: at the service's clock speed they must outlast a download.
    assert args.link_ttl / args.clock_speed >= 300
    # The health check asks the emulator's own admin route, on the port the command listens on.
    from abm_emulator.admin import admin_router

    probe = " ".join(compose["services"]["abm-emulator"]["healthcheck"]["test"])
    url = re.search(r"http://localhost:(\d+)(/\S+?)'", probe)
    assert url and int(url.group(1)) == args.port
    assert url.group(2) in {route.path for route in admin_router.routes}  # type: ignore[attr-defined]


def test_the_connections_reach_the_services(compose: dict[str, Any]) -> None:
    env = compose["services"]["airflow-scheduler"]["environment"]
    connections = {
        key.removeprefix("AIRFLOW_CONN_").lower(): json.loads(substitute(value))
        for key, value in env.items()
        if key.startswith("AIRFLOW_CONN_")
    }
    emulator = compose["services"]["abm-emulator"]
    api_port = shlex.split(emulator["command"])[shlex.split(emulator["command"]).index("--port") + 1]
    abm = connections["abm_default"]
    assert abm["conn_type"] == "abm"
    assert abm["host"] == f"http://abm-emulator:{api_port}"
    key = re.search(r"--api-key (\S+)", emulator["command"])
    assert key and abm["password"] == substitute(key.group(1)), "connection and emulator keys differ"
    warehouse = connections["abm_warehouse"]
    assert warehouse["conn_type"] == "postgres" and warehouse["host"] == "postgres"
    created = re.findall(r"CREATE DATABASE (\w+)", (ROOT / "docker" / "init-warehouse.sql").read_text())
    assert warehouse["schema"] in created
    postgres_env = compose["services"]["postgres"]["environment"]
    assert (warehouse["login"], warehouse["password"]) == (
        postgres_env["POSTGRES_USER"],
        postgres_env["POSTGRES_PASSWORD"],
    )


def test_health_checks_run_something(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        test = service["healthcheck"]["test"]
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name


def test_the_dockerfile_installs_extras_the_project_defines() -> None:
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    match = re.search(r'"/opt/abm\[([^\]]*)\]"', DOCKERFILE.read_text())
    assert match, "the Dockerfile does not install the provider from the source tree"
    wanted = set(match.group(1).split(","))
    assert wanted <= extras and "postgres" in wanted


@pytest.mark.parametrize("scenario", ["e2e", "e2e_events"])
def test_the_e2e_run_defines_the_same_connections_as_compose(compose: dict[str, Any], scenario: str) -> None:
    """``make e2e`` is the compose topology as local processes: the DAGs must find the same connections,
    in each of its scenarios."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))  # the scripts import their siblings, as when run
    stack = importlib.import_module("e2e_stack")
    setup = importlib.import_module(scenario).STACK
    local = stack.airflow_env(setup, Path("/tmp/home"), 8080, "http://127.0.0.1:1", "marker", 5)
    compose_env = compose["services"]["airflow-worker"]["environment"]
    assert {k for k in local if k.startswith("AIRFLOW_CONN_")} == {
        k for k in compose_env if k.startswith("AIRFLOW_CONN_")
    }
    assert local["AIRFLOW__CORE__EXECUTOR"] == compose_env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert "AIRFLOW__ABM__STATE_DIR" in local and "AIRFLOW__ABM__STATE_DIR" in compose_env


def dag_default(variable: str) -> str:
    """The default an example DAG gives an ``ABM_*`` environment variable."""
    defaults = dag_env_defaults()
    assert variable in defaults, f"no DAG reads {variable}"
    return defaults[variable]


@pytest.mark.postgres
def test_the_warehouse_init_script_creates_what_the_dags_read(compose: dict[str, Any]) -> None:
    """Run ``init-warehouse.sql`` as the postgres image would (psql), under a throwaway database name."""
    import shutil
    import subprocess
    import uuid

    psycopg = pytest.importorskip("psycopg")
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed on this machine")
    require_postgres("postgres")
    mounts = compose["services"]["postgres"]["volumes"]
    assert any("init-warehouse.sql:/docker-entrypoint-initdb.d/" in m for m in mounts)
    warehouse_db = compose["x-airflow-common"]["environment"]["AIRFLOW_CONN_ABM_WAREHOUSE"]
    name = f"abm_init_{uuid.uuid4().hex[:8]}"
    script = (ROOT / "docker" / "init-warehouse.sql").read_text()
    assert "abm_warehouse" in warehouse_db and script.count("abm_warehouse") == 2
    try:
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-q"],
            input=script.replace("abm_warehouse", name),
            text=True,
            check=True,
            capture_output=True,
            timeout=60,
        )
        with psycopg.connect(postgres_dsn(name)) as conn:
            columns = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "ORDER BY ordinal_position",
                    [dag_default("ABM_TARGET_ACCOUNTS_TABLE")],
                )
            ]
        assert columns == ["account_id", "account_name", "crm_org_id"]
    finally:
        with psycopg.connect(postgres_dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
