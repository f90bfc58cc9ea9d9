"""``abm_provider.get_provider_info``: the provider as Airflow discovers it, and the CLI tooling."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import abm_provider
from abm_provider.hooks.abm import AbmHook

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def _abm_connection_type() -> dict[str, Any]:
    types = abm_provider.get_provider_info()["connection-types"]
    return next(t for t in types if t["connection-type"] == "abm")


def test_provider_info_lists_every_kind_of_component() -> None:
    info = abm_provider.get_provider_info()
    assert info["package-name"] == "airflow-provider-abm"
    for kind in ("hooks", "operators", "sensors", "triggers", "transfers", "connection-types"):
        assert info[kind], kind
    assert info["hooks"][0]["python-modules"] == ["abm_provider.hooks.abm"]


def test_every_listed_module_imports() -> None:
    info = abm_provider.get_provider_info()
    modules = [
        m
        for kind in ("hooks", "operators", "sensors", "triggers")
        for e in info[kind]
        for m in e["python-modules"]
    ]
    modules += [t["python-module"] for t in info["transfers"]]
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            missing.append(f"{module}: {err}")
    assert not missing, missing


def test_connection_type_matches_the_hook() -> None:
    conn_type = _abm_connection_type()
    module, _, name = conn_type["hook-class-name"].rpartition(".")
    hook_class = getattr(importlib.import_module(module), name)
    assert hook_class is AbmHook
    assert (AbmHook.conn_type, AbmHook.default_conn_name, AbmHook.conn_name_attr) == (
        "abm",
        "abm_default",
        "abm_conn_id",
    )
    behaviour = AbmHook.get_ui_field_behaviour()
    form = conn_type["ui-field-behaviour"]
    assert behaviour == {
        "hidden_fields": form["hidden-fields"],
        "relabeling": form["relabeling"],
        "placeholders": form["placeholders"],
    }
    assert behaviour["relabeling"] == {"host": "Base URL", "password": "API key"}
    assert {"max_attempts", "retry_max_wait", "request_timeout", "max_pages", "verify", "auth_type"} <= set(
        conn_type["conn-fields"]
    )


def test_package_import_stays_light() -> None:
    code = (
        "import sys, abm_provider; abm_provider.get_provider_info(); "
        "print(sorted(m for m in ('airflow', 'requests', 'pandas', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _airflow(tmp_path: Path, *args: str, conns: dict[str, dict[str, Any]] | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "AIRFLOW__"))}
    env["AIRFLOW_HOME"] = str(tmp_path)
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    env["AIRFLOW__CORE__TEST_CONNECTION"] = "Enabled"
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{tmp_path / 'airflow.db'}"
    for conn_id, conn in (conns or {}).items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
    result = subprocess.run(
        [AIRFLOW, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180
    )
    return result.stdout + result.stderr


def test_airflow_cli_lists_provider_and_connection_type(tmp_path: Path) -> None:
    providers = _airflow(tmp_path, "providers", "list", "-o", "json")
    assert "airflow-provider-abm" in providers
    hooks = _airflow(tmp_path, "providers", "hooks", "-o", "json")
    start = hooks.index("[")
    listed = json.loads(hooks[start : hooks.rindex("]") + 1])
    abm = [h for h in listed if h["connection_type"] == "abm"]
    assert abm and abm[0]["class"] == "abm_provider.hooks.abm.AbmHook"
    assert abm[0]["conn_id_attribute_name"] == "abm_conn_id"


def test_airflow_connections_test_against_the_emulator(tmp_path: Path, emulator: Any) -> None:
    good = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
    bad = {**good, "password": "not-the-key-7f3a9"}
    ok = _airflow(tmp_path, "connections", "test", "abm_cli", conns={"abm_cli": good})
    assert "Connection success!" in ok
    refused = _airflow(tmp_path, "connections", "test", "abm_cli", conns={"abm_cli": bad})
    assert "Connection failed!" in refused
    assert "refused the API key" in refused and "401" in refused
    assert "not-the-key-7f3a9" not in refused


@pytest.mark.parametrize(
    ("host", "rule"),
    [("http://api.example.com", "use https://"), ("ftp://x", "scheme 'ftp'; only https is allowed")],
)
def test_connection_test_reports_an_unusable_connection(
    host: str, rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_ABM_BAD", json.dumps({"conn_type": "abm", "host": host, "password": "k"})
    )
    ok, message = AbmHook("abm_bad").test_connection()
    assert not ok
    assert "abm_bad" in message and rule in message


def test_the_providers_page_gets_no_documentation_link_that_leads_nowhere() -> None:
    """Airflow's Providers page links ``documentation-url``, read from a "Documentation" project URL.

    The package has no public home yet, so it declares no project URL, and the page shows no link
    rather than a dead one; Airflow takes the missing URL as ``None``.
    """
    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["airflow-provider-abm"]
    assert info.data["documentation-url"] is None
