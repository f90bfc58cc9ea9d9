"""Airflow's React UI in headless Chromium: an API server to drive, and the Connections page's parts.

The locators follow Airflow 3.3's markup: the Add Connection dialog is ``[role=dialog]``; the type
selector and the dropdown fields are react-select comboboxes; the extra fields are Airflow's flexible
form (``#element_<name>``, ``number-input:element_<name>``, ``switch:element_<name>``) in accordion
sections of which one is open at a time; the Extra Fields JSON is a Monaco editor; results come as
Chakra toasts. Every wait is on an element or a state, never a fixed sleep.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DIALOG = "[role=dialog]"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def browser_missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        return f"{' and '.join(missing)} not installed (Debian packages chromium and chromium-driver)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the process group this module started (``start_new_session``), and only that."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@contextmanager
def airflow_api_server(home: Path) -> Iterator[str]:
    """``airflow api-server`` on a free loopback port with a fresh SQLite database; yields its URL.

    Every user is an admin (the simple auth manager's all-admins mode), so no login page stands in
    the way, and the connection test is enabled.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__CORE__TEST_CONNECTION="Enabled",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
    )
    (home / "dags").mkdir(parents=True, exist_ok=True)
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    port = _free_port()
    log = (home / "api-server.log").open("wb")
    process = subprocess.Popen(
        [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while not _healthy(base):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"airflow api-server did not come up:\n{_tail(home / 'api-server.log')}")
            time.sleep(0.25)  # polling a process we cannot get an event from
        yield base
    finally:
        _stop(process)
        log.close()


def _healthy(base: str) -> bool:
    try:
        return requests.get(f"{base}/api/v2/monitor/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """Debian's headless Chromium through its chromedriver: nothing is downloaded."""
    os.environ.setdefault("SE_AVOID_STATS", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--window-size=1400,1800",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class ConnectionsPage:
    """The Connections page of one API server, in one browser."""

    def __init__(self, driver: webdriver.Chrome, base: str) -> None:
        self.driver = driver
        self.base = base

    def wait(self, seconds: float = 30) -> WebDriverWait[webdriver.Chrome]:
        return WebDriverWait(self.driver, seconds, ignored_exceptions=(StaleElementReferenceException,))

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    # -- the Add Connection dialog ---------------------------------------------------------------

    def open_add_form(self, hook_name: str) -> None:
        """Open Add Connection and choose the type by its hook name; the abm fields appear."""
        self.driver.get(f"{self.base}/connections")
        add = (By.XPATH, "//button[normalize-space()='Add Connection']")
        self.wait(90).until(ec.element_to_be_clickable(add)).click()
        self.wait().until(
            ec.visibility_of_element_located((By.CSS_SELECTOR, f"{DIALOG} input[name=connection_id]"))
        )
        combo = self.find(f"{DIALOG} input[role=combobox]")
        combo.click()
        combo.send_keys("abm")
        option = (By.XPATH, f"//*[@role='option'][normalize-space()='{hook_name}']")
        self.wait().until(ec.element_to_be_clickable(option)).click()
        self.wait().until(ec.visibility_of_element_located((By.CSS_SELECTOR, f"{DIALOG} input[name=host]")))

    def open_section(self, title: str) -> None:
        """Open one accordion section (Standard Fields, Extra Fields, Extra Fields JSON)."""
        trigger = self.driver.find_element(
            By.XPATH, f"//*[@role='dialog']//button[@data-part='item-trigger'][normalize-space()='{title}']"
        )
        if trigger.get_attribute("aria-expanded") != "true":
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", trigger)
            trigger.click()
        self.wait().until(lambda _: trigger.get_attribute("aria-expanded") == "true")
        content = trigger.get_attribute("aria-controls")
        if content:
            self.wait().until(ec.visibility_of_element_located((By.ID, content)))

    def standard_fields(self) -> dict[str, dict[str, Any]]:
        """Each visible standard field by name: its label, input type and placeholder."""
        found: dict[str, dict[str, Any]] = self.driver.execute_script(
            """
            const out = {};
            const dialog = document.querySelector('[role=dialog]');
            for (const el of dialog.querySelectorAll('input[name], textarea[name]')) {
              const name = el.getAttribute('name');
              if (name.startsWith('element_') || el.type === 'hidden') continue;
              const root = el.closest('[role=group]') || el.closest('[data-scope=field]');
              const label = root && root.querySelector('label');
              out[name] = {label: label ? label.textContent.replace('*', '').trim() : null,
                           type: el.getAttribute('type'), placeholder: el.getAttribute('placeholder')};
            }
            return out;
            """
        )
        return found

    def extra_widgets(self, names: list[str]) -> dict[str, dict[str, Any] | None]:
        """The widget each extra field is drawn as, with its label and starting value."""
        found: dict[str, dict[str, Any] | None] = self.driver.execute_script(
            """
            const out = {};
            for (const n of arguments[0]) {
              const el = document.getElementById('element_' + n)
                || document.getElementById('number-input:element_' + n)
                || document.getElementById('switch:element_' + n);
              if (!el) { out[n] = null; continue; }
              const root = el.closest('[role=group]');
              const label = root && root.querySelector('label');
              const info = {label: label ? label.textContent.replace('*', '').trim() : null};
              const scope = el.getAttribute('data-scope');
              if (scope === 'number-input') {
                Object.assign(info, {widget: 'number', value: el.querySelector('input').value});
              } else if (scope === 'switch' || el.querySelector('input[type=checkbox]')) {
                const box = el.querySelector('input[type=checkbox]');
                Object.assign(info, {widget: 'switch', checked: box.checked});
              } else if (el.tagName === 'TEXTAREA') {
                Object.assign(info, {widget: 'textarea', value: el.value});
              } else if (el.tagName === 'INPUT') {
                Object.assign(info, {widget: 'text', type: el.type, value: el.value});
              } else if (el.querySelector('input[role=combobox]')) {
                const hidden = document.querySelector('input[type=hidden][name=element_' + n + ']');
                Object.assign(info, {widget: 'select', shown: el.innerText.split('\\n')[0],
                                     value: hidden ? hidden.value : null});
              } else {
                Object.assign(info, {widget: el.tagName.toLowerCase() + '/' + scope});
              }
              out[n] = info;
            }
            return out;
            """,
            names,
        )
        return found

    def select_options(self, name: str) -> list[str]:
        """The options a dropdown extra field offers; the menu is closed by picking the current value.

        (Escape would close the whole dialog.)
        """
        current = self.extra_widgets([name])[name]
        assert current is not None
        combo = self.find(f"#element_{name} input[role=combobox]")
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", combo)
        combo.click()
        options = self.wait().until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "[role=option]") or None,
            f"the options of {name} did not open",
        )
        texts = [option.text for option in options]
        next(option for option in options if option.text == current["shown"]).click()
        self.wait().until_not(lambda d: d.find_elements(By.CSS_SELECTOR, "[role=option]"))
        return texts

    def extra_json(self) -> str:
        """The whole value of the Extra Fields JSON editor (Monaco draws only the visible lines)."""
        text: str = self.driver.execute_script(
            """
            const editor = document.querySelector('[role=dialog] .monaco-editor');
            for (let el = editor; el; el = el.parentElement) {
              const key = Object.keys(el).find(k => k.startsWith('__reactFiber$'));
              if (!key) continue;
              for (let fiber = el[key]; fiber; fiber = fiber.return) {
                const props = fiber.memoizedProps;
                if (props && typeof props.value === 'string' && typeof props.onChange === 'function') {
                  return props.value;
                }
              }
              break;
            }
            return null;
            """
        )
        return text

    def fill(self, css: str, text: str) -> None:
        """Type into a field and leave it: the form validates on blur, and Save waits for that."""
        field = self.find(css)
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", field)
        field.click()
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(Keys.DELETE)
        field.send_keys(text)
        field.send_keys(Keys.TAB)

    def save(self) -> dict[str, str | None]:
        button = self.driver.find_element(
            By.XPATH, "//*[@role='dialog']//footer//button[normalize-space()='Save']"
        )
        self.wait().until(lambda _: button.is_enabled())
        button.click()
        return self.toast()

    def add_connection(self, hook_name: str, conn_id: str, host: str, port: int, key: str) -> dict[str, Any]:
        """Fill the standard fields of a new connection and save it; returns the toast."""
        self.open_add_form(hook_name)
        self.open_section("Standard Fields")
        self.fill(f"{DIALOG} input[name=connection_id]", conn_id)
        self.fill(f"{DIALOG} input[name=host]", host)
        self.fill(f"{DIALOG} input[name=port]", str(port))
        self.fill(f"{DIALOG} input[name=password]", key)
        return self.save()

    # -- the list's Test button and the toasts ---------------------------------------------------

    def test_connection(self, conn_id: str) -> dict[str, str | None]:
        """Press the Test button of a connection's row; returns the toast it raises."""
        self.driver.get(f"{self.base}/connections")
        row = (
            By.XPATH,
            f"//tbody/tr[td[@data-testid='table-cell-connection_id'][normalize-space()='{conn_id}']]",
        )
        found = self.wait(60).until(ec.presence_of_element_located(row))
        found.find_element(
            By.CSS_SELECTOR, "td[data-testid=table-cell-actions] button[aria-label='Test Connection']"
        ).click()
        return self.toast()

    def toast(self) -> dict[str, str | None]:
        """The newest toast with its description rendered: type (success/error), title, description."""
        css = "[data-scope=toast][data-part=root]"

        def newest(driver: webdriver.Chrome) -> dict[str, str | None] | None:
            toasts = driver.find_elements(By.CSS_SELECTOR, css)
            if not toasts:
                return None
            toast = toasts[0]
            description = toast.find_elements(By.CSS_SELECTOR, "[data-part=description]")
            title = toast.find_elements(By.CSS_SELECTOR, "[data-part=title]")
            if not title or not title[0].text:
                return None
            return {
                "type": toast.get_attribute("data-type"),
                "title": title[0].text,
                "description": description[0].text if description else None,
            }

        return self.wait(60).until(newest, "no toast appeared")
