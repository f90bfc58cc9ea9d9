"""The ``abm`` connection form in Airflow's own UI, driven in headless Chromium as a user would.

``airflow api-server`` (Airflow 3.3, fresh SQLite database) and the emulator run as processes; the
browser opens Add Connection, picks the ABM type, and the test reads what the form shows, saves a
connection, and presses Test. Screenshots of the form and of the Test results are kept in the test's
folder, or in ``$ABM_UI_SCREENSHOTS`` when set.

Runs wherever Debian's ``chromium`` and ``chromium-driver`` are installed (``make test`` installs
them when it runs as root); elsewhere it is skipped with the reason, and under ``CI=true`` it fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

import abm_provider

from .ui_support import (
    DIALOG,
    ConnectionsPage,
    airflow_api_server,
    browser_missing,
    chromium,
)

pytestmark = pytest.mark.slow


def _conn_type() -> dict[str, Any]:
    return next(
        t for t in abm_provider.get_provider_info()["connection-types"] if t["connection-type"] == "abm"
    )


HOOK_NAME = _conn_type()["hook-name"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectionsPage]:
    why = browser_missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test must run in CI: {why}")
        pytest.skip(f"BROWSER TEST NOT RUN: {why}; `make test` as root installs them")
    home = tmp_path_factory.mktemp("airflow-ui")
    with airflow_api_server(home) as base, chromium(home / "chromium-profile") as driver:
        yield ConnectionsPage(driver, base)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = Path(os.environ.get("ABM_UI_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    where.mkdir(parents=True, exist_ok=True)
    return where


def _host_and_port(base_url: str) -> tuple[str, int]:
    host, port = base_url.rsplit(":", 1)
    return host, int(port)


def test_the_add_form_shows_the_abm_fields_and_saves_them(
    ui: ConnectionsPage, emulator: Any, screenshots: Path
) -> None:
    ui.open_add_form(HOOK_NAME)
    ui.open_section("Standard Fields")
    standard = ui.standard_fields()
    # The connection's own fields, relabelled; login and schema mean nothing for this API.
    assert standard["host"]["label"] == "Base URL"
    assert standard["host"]["placeholder"] == "https://api.terminusplatform.com"
    assert standard["password"] == {
        "label": "API key",
        "type": "password",
        "placeholder": "API key (sent as Authorization: Bearer <key>)",
    }
    assert standard["port"]["label"] == "Port"
    assert standard["port"]["placeholder"] == "the Base URL's (443 for https)"
    assert "login" not in standard and "schema" not in standard
    ui.driver.save_screenshot(str(screenshots / "form-standard.png"))

    ui.open_section("Extra Fields")
    fields = _conn_type()["conn-fields"]
    widgets = ui.extra_widgets(list(fields))
    for name, spec in fields.items():
        widget, schema = widgets[name], spec["schema"]
        assert widget is not None, f"{name} is not drawn"
        assert widget["label"] == spec["label"], name
        kind = schema["type"][0] if isinstance(schema["type"], list) else schema["type"]
        if "enum" in schema:
            assert widget["widget"] == "select" and widget["shown"] == widget["value"] == schema["default"], (
                widget
            )
        elif kind == "boolean":
            assert widget == {"label": spec["label"], "widget": "switch", "checked": schema["default"]}
        elif kind in ("integer", "number"):
            assert widget["widget"] == "number" and float(widget["value"]) == schema["default"], (
                name,
                widget,
            )
        else:
            assert widget == {"label": spec["label"], "widget": "text", "type": "text", "value": ""}, name
    # No "null" to choose, no "null" shown.
    assert ui.select_options("auth_type") == ["bearer", "basic"]
    ui.driver.save_screenshot(str(screenshots / "form.png"))

    ui.open_section("Extra Fields JSON")
    extra = json.loads(ui.extra_json())
    assert extra == {name: spec["schema"].get("default") for name, spec in fields.items()}
    assert [name for name, value in extra.items() if value is None] == ["ca_bundle"]

    host, port = _host_and_port(emulator.base_url)
    toast = ui.add_connection(HOOK_NAME, "abm_ui", host, port, emulator.api_key)
    assert toast["type"] == "success", toast
    saved = requests.get(f"{ui.base}/api/v2/connections/abm_ui", timeout=30).json()
    assert (saved["conn_type"], saved["host"], saved["port"]) == ("abm", host, port)
    assert json.loads(saved["extra"])["auth_type"] == "bearer"


def test_the_test_button_names_the_host_and_says_what_failed(
    ui: ConnectionsPage, emulator: Any, screenshots: Path
) -> None:
    host, port = _host_and_port(emulator.base_url)
    for conn_id, key in (("abm_ui_ok", emulator.api_key), ("abm_ui_wrong", "not-the-key-4711")):
        assert ui.add_connection(HOOK_NAME, conn_id, host, port, key)["type"] == "success"

    passed = ui.test_connection("abm_ui_ok")
    ui.driver.save_screenshot(str(screenshots / "test-success.png"))
    assert passed["type"] == "success", passed
    assert passed["description"] == f"Connected to {emulator.base_url}: the API key was accepted"

    refused = ui.test_connection("abm_ui_wrong")
    ui.driver.save_screenshot(str(screenshots / "test-wrong-key.png"))
    assert refused["type"] == "error", refused
    description = refused["description"] or ""
    assert description.startswith(f"{emulator.base_url} refused the API key: ")
    assert "401 UNAUTHENTICATED" in description
    assert "check the API key (password) of this connection" in description
    # Neither the key nor Airflow's throwaway id for the test reaches the user.
    assert "not-the-key-4711" not in description and "connection '" not in description
    assert not ui.driver.find_elements("css selector", DIALOG)
