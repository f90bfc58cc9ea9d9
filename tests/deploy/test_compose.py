"""The compose stack cannot be started here (no Docker engine), so its consistency is checked instead."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

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


def dag_connection_ids() -> set[str]:
    """Connection ids the example DAGs use by default (the second argument of os.environ.get)."""
    ids: set[str] = set()
    for path in (ROOT / "dags").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).endswith("_CONN_ID")
            ):
                ids.add(node.args[1].value)  # type: ignore[attr-defined]
    return ids


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
