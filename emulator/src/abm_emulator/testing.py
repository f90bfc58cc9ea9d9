"""Start the emulator as a real subprocess for tests, scripts and demos.

A subprocess (not an in-process app) so that the code under test talks HTTP over real sockets to a
separate process, exactly as it would to the real service, and so faults like connection resets are
real. `start_emulator` returns only once ``/_admin/health`` answers, and never leaves a process behind
when start-up fails.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import IO, Any
from urllib.parse import quote

import requests

READY_PREFIX = "ABM_EMULATOR_READY "
ADMIN_TIMEOUT = 30.0


class EmulatorError(RuntimeError):
    """The emulator did not start, or an admin call failed; the message carries its output."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _cli_args(options: dict[str, Any]) -> list[str]:
    """``clock_speed=2880`` -> ``--clock-speed 2880``; ``api_keys=[a, b]`` -> ``--api-key a --api-key b``."""
    args: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + ("api-key" if name in ("api_keys", "api_key") else name.replace("_", "-"))
        values: Iterable[Any] = value if isinstance(value, list | tuple) else [value]
        for item in values:
            args += [flag] if item is True else [flag, str(item)]
    return args


class RunningEmulator:
    """A started emulator process with helpers over its admin API."""

    def __init__(self, process: subprocess.Popen[str], ready: dict[str, Any], stderr_path: str) -> None:
        self.process = process
        self.base_url: str = ready["base_url"]
        self.storage_url: str = ready["storage_url"]
        self.api_keys: list[str] = list(ready["api_keys"])
        self.api_key: str = self.api_keys[0]
        self.pid: int = ready["pid"]
        self._stderr_path = stderr_path
        self._session = requests.Session()

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> RunningEmulator:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, then SIGKILL if it does not exit; returns the exit code."""
        self._session.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def stderr_text(self) -> str:
        try:
            with open(self._stderr_path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    # ----------------------------------------------------------------- admin helpers
    def admin(self, method: str, path: str, json: Any = None) -> Any:
        """Call the admin API and return its JSON; raise `EmulatorError` with the answer on failure."""
        url = self.base_url + (path if path.startswith("/_admin") else "/_admin/" + path.lstrip("/"))
        response = self._session.request(method, url, json=json, timeout=ADMIN_TIMEOUT)
        if response.status_code >= 400:
            raise EmulatorError(f"admin {method} {path} -> {response.status_code}: {response.text}")
        return response.json() if response.content else None

    def reset(self) -> None:
        self.admin("POST", "/_admin/reset")

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self.admin("GET", "/_admin/state")
        return result

    def clock(self) -> dict[str, Any]:
        result: dict[str, Any] = self.admin("GET", "/_admin/clock")
        return result

    def inject_fault(self, **fault: Any) -> dict[str, Any]:
        """Add a fault; keys as in the admin JSON (``afterBytes``) or snake_case (``after_bytes``).

        ``body_contains="001BAD"`` fires only for requests whose body holds that text, e.g. every add
        batch with one account (with ``status=400``, the answer names it: ``accounts[i].id``).
        """
        result: dict[str, Any] = self.admin(
            "POST", "/_admin/faults", {_camel(k): v for k, v in fault.items()}
        )
        return result

    def clear_faults(self) -> None:
        self.admin("DELETE", "/_admin/faults")

    def make_accounts_unknown(self, account_ids: Iterable[str]) -> list[str]:
        """The service no longer knows these account ids (in every customer account, any CRM org): an
        add answers them in ``accountsNotFound``; a remove leaves them on the list and out of its
        answer. Until :meth:`make_accounts_known` or :meth:`reset`. Returns every unknown id."""
        result = self.admin("POST", "/_admin/unknownAccounts", {"ids": _id_list(account_ids)})
        ids: list[str] = result["ids"]
        return ids

    def make_accounts_known(self, account_ids: Iterable[str] | None = None) -> list[str]:
        """These ids (``None``: every id made unknown) known again; returns the ids still unknown."""
        body = None if account_ids is None else {"ids": _id_list(account_ids)}
        result = self.admin("DELETE", "/_admin/unknownAccounts", body)
        ids: list[str] = result["ids"]
        return ids

    def unknown_accounts(self) -> list[str]:
        """The account ids made unknown, sorted."""
        ids: list[str] = self.admin("GET", "/_admin/unknownAccounts")["ids"]
        return ids

    def fire(self, export_type: str, **kw: Any) -> dict[str, Any]:
        """Start an execution now (``outcome``, ``pending_seconds``, ``running_seconds``, ``size_bytes``,
        ``api_key``; camelCase accepted too); returns the execution as the API shows it."""
        body = {_camel(k): v for k, v in kw.items()}
        body.setdefault("apiKey", self.api_key)
        result: dict[str, Any] = self.admin("POST", f"/_admin/exportJobs/{export_type}/fire", body)
        return result

    def advance(self, seconds: float) -> dict[str, Any]:
        result: dict[str, Any] = self.admin("POST", "/_admin/clock/advance", {"seconds": seconds})
        return result

    def members(self, list_id: str, api_key: str | None = None) -> list[dict[str, Any]]:
        key = quote(api_key or self.api_key, safe="")
        result = self.admin("GET", f"/_admin/accounts/{key}/lists/{list_id}/members")
        members: list[dict[str, Any]] = result["members"]
        return members

    def account_state(self, api_key: str | None = None) -> dict[str, Any]:
        """The admin state of the customer account behind ``api_key`` (default: the first key)."""
        key = api_key or self.api_key
        for account in self.state()["accounts"].values():
            if key in account["apiKeys"]:
                found: dict[str, Any] = account
                return found
        raise EmulatorError("no customer account of this emulator has that API key")

    def crm_org_id(self, api_key: str | None = None) -> str:
        """The CRM org of ``api_key``'s account (admin state ``crmOrgId``): what the emulator fills in
        for an account sent without ``crmOrgId``."""
        org: str = self.account_state(api_key)["crmOrgId"]
        return org

    def airflow_connection(self, api_key: str | None = None) -> str:
        """An ``abm`` Airflow connection to this emulator, as JSON for ``AIRFLOW_CONN_<ID>``."""
        return json.dumps({"conn_type": "abm", "host": self.base_url, "password": api_key or self.api_key})

    def requests_seen(self) -> list[dict[str, Any]]:
        """Recent requests of both origins, oldest first (admin calls left out): ``origin``, ``method``,
        ``path``, ``query``, ``headers``, ``status``, ``requestId``, and for the API origin ``bodyBytes``
        and ``body``, the parsed JSON body (``None`` when not JSON, over 1 MiB, or dropped to keep the
        log's bodies within 64 MiB), so a test can read which accounts each add or remove carried.

        A request is logged when it arrives; ``status`` is ``None`` until its answer starts. A test
        that waits for a request before changing the emulator's state waits for its status, or the
        request still being served may see the change."""
        seen: list[dict[str, Any]] = self.admin("GET", "/_admin/requests")["requests"]
        return seen


def _id_list(account_ids: Iterable[str]) -> list[str]:
    """One id given as a string is that id, not its characters."""
    return [account_ids] if isinstance(account_ids, str) else list(account_ids)


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM it when the parent dies (even by SIGKILL).

    Without it a test run killed by a timeout leaves emulators listening forever.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    # Keeps draining stdout for the life of the process, so the pipe never fills and blocks it.
    for line in stream:
        lines.put(line)
    lines.put(None)


def start_emulator(*, startup_timeout: float = 60.0, **cli_options: Any) -> RunningEmulator:
    """Start ``python -m abm_emulator`` on free ports with ``cli_options`` as CLI flags.

    ``api_keys=[...]`` becomes repeated ``--api-key``; ``port``/``storage_port`` default to 0 (free).
    """
    options: dict[str, Any] = {"port": 0, "storage_port": 0, **cli_options}
    command = [sys.executable, "-m", "abm_emulator", *_cli_args(options)]
    stderr_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
        prefix="abm-emulator-", suffix=".stderr", delete=False
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # The death signal follows the thread that forked, so it is only armed from the main thread.
    in_main_thread = threading.current_thread() is threading.main_thread()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent if in_main_thread else None,
    )
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()

    def fail(reason: str) -> EmulatorError:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        stderr_file.close()
        with open(stderr_file.name, encoding="utf-8", errors="replace") as handle:
            err = handle.read()
        return EmulatorError(f"{reason}\ncommand: {' '.join(command)}\nstderr:\n{err[-4000:]}")

    deadline = time.monotonic() + startup_timeout
    ready: dict[str, Any] | None = None
    while ready is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise fail(f"no {READY_PREFIX.strip()} line within {startup_timeout:g}s")
        try:
            line = lines.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            continue
        if line is None:
            raise fail(f"emulator exited with code {process.wait(10)} before it was ready")
        if line.startswith(READY_PREFIX):
            ready = json.loads(line[len(READY_PREFIX) :])
    stderr_file.close()
    running = RunningEmulator(process, ready, stderr_file.name)
    while True:
        try:
            if running.admin("GET", "/_admin/health") == {"ok": True}:
                atexit.register(running.stop)
                return running
        except (requests.RequestException, EmulatorError):
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            running._session.close()
            raise fail("emulator printed READY but /_admin/health did not answer")
        time.sleep(0.05)
