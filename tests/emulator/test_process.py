"""The CLI process itself: READY line, restart with --state-file, shared accounts, rate limit, shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from emulator_api import Api, error_of

from abm_emulator.testing import EmulatorError, start_emulator


def test_state_file_survives_a_restart(tmp_path):
    state_file = tmp_path / "state.json"
    with start_emulator(api_keys=["k"], state_file=state_file, clock_start="2030-01-01T06:00:00Z") as first:
        api = Api(first.base_url, "k")
        list_id = api.account_list("kept")
        api.post(
            f"/accountLists/v2/accountLists/{list_id}/accounts/add",
            {"accounts": [{"id": "001000000000001", "crmOrgId": "o", "crmType": "SALESFORCE"}]},
        )
        api.job(schedule="0 5 1 1 *")  # yearly: no scheduled run in the day advanced below
        fired = first.fire("TACTIC_PERFORMANCE")
        first.advance(86_400)
        clock_before = first.clock()["now"]
        assert first.stop() == 0
    assert state_file.exists()
    with start_emulator(api_keys=["k"], state_file=state_file) as second:
        api = Api(second.base_url, "k")
        assert [m["id"] for m in second.members(list_id, api_key="k")] == ["001000000000001"]
        [run] = api.all_executions(filter="state=COMPLETE")
        assert run["id"] == fired["id"]
        assert requests.get(run["downloadUri"], timeout=30).status_code == 200  # re-rendered after restart
        assert second.clock()["now"] >= clock_before


def test_crm_org_is_stable_across_restarts_and_old_state_files(tmp_path):
    state_file = tmp_path / "state.json"
    with start_emulator(api_keys=["k"], state_file=state_file) as first:
        org = first.crm_org_id("k")
        api = Api(first.base_url, "k")
        list_id = api.account_list()
        added = api.post(
            f"/accountLists/v2/accountLists/{list_id}/accounts/add", {"accounts": [{"id": "001000000000001"}]}
        )
        assert added.status_code == 200, added.text
        assert first.stop() == 0
    data = json.loads(state_file.read_text())
    [saved] = data["accounts"].values()
    assert saved["crm_org_id"] == org
    del saved["crm_org_id"]  # as written before the field existed: derived again on load
    state_file.write_text(json.dumps(data))

    with start_emulator(api_keys=["k"], state_file=state_file) as second:
        assert second.crm_org_id("k") == org
        member = {"id": "001000000000001", "name": "", "crmOrgId": org, "crmType": "SALESFORCE"}
        assert second.members(list_id, api_key="k") == [member]
        removed = Api(second.base_url, "k").post(
            f"/accountLists/v2/accountLists/{list_id}/accounts/remove", {"accounts": [{"id": member["id"]}]}
        )
        assert removed.json()["accounts"] == [member]
    with start_emulator(api_keys=["k"]) as fresh:  # no state at all: the same org from the account name
        assert fresh.crm_org_id("k") == org


def test_shared_account_keys_and_ready_line(tmp_path):
    command = [
        sys.executable,
        "-m",
        "abm_emulator",
        "--port",
        "0",
        "--storage-port",
        "0",
        "--api-key",
        "one:team",
        "--api-key",
        "two:team",
        "--api-key",
        "three",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("ABM_EMULATOR_READY "):
                break
        ready_lines = [line for line in lines if line.startswith("ABM_EMULATOR_READY ")]
        assert len(ready_lines) == 1 and len(lines) > 1  # human lines first
        ready = json.loads(ready_lines[0].split(" ", 1)[1])
        assert ready["api_keys"] == ["one", "two", "three"] and ready["pid"] == process.pid
        one, two, three = (Api(ready["base_url"], k) for k in ("one", "two", "three"))
        folder = one.folder("shared")
        for _ in range(50):
            try:
                listed = two.get("/accountLists/v2/folders")
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        assert [f["uuid"] for f in listed.json()["folders"]] == [folder]
        assert three.get("/accountLists/v2/folders").json()["folders"] == []
    finally:
        process.terminate()
        assert process.wait(15) == 0


def test_rate_limit_answers_429_with_retry_after():
    with start_emulator(api_keys=["fast", "other"], rate_limit=3) as emulator:
        fast, other = Api(emulator.base_url, "fast"), Api(emulator.base_url, "other")
        codes = [fast.get("/accountLists/v2/folders") for _ in range(8)]
        limited = [r for r in codes if r.status_code == 429]
        assert limited and codes[0].status_code == 200
        assert error_of(limited[0])["status"] == "RESOURCE_EXHAUSTED"
        assert int(limited[0].headers["retry-after"]) >= 1 and limited[0].headers["x-request-id"]
        assert other.get("/accountLists/v2/folders").status_code == 200  # buckets are per key
        assert emulator.admin("GET", "/_admin/health") == {"ok": True}  # admin is never limited


def test_bad_cli_options_fail_start_with_the_reason():
    with pytest.raises(EmulatorError, match="clock-speed"):
        start_emulator(clock_speed=-1, startup_timeout=20)


def test_sigint_stops_cleanly_and_removes_the_temporary_data_dir():
    command = [sys.executable, "-m", "abm_emulator", "--port", "0", "--storage-port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    data_dir = None
    try:
        for line in process.stdout:
            if "files in " in line:
                data_dir = Path(line.rsplit("files in ", 1)[1].strip())
            if line.startswith("ABM_EMULATOR_READY "):
                break
        assert data_dir is not None and data_dir.is_dir()
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0
    assert not data_dir.exists()
