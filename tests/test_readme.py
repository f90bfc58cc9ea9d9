"""The README's curl session runs as printed against a freshly started emulator.

A newcomer copies that block into a shell; if the API or the emulator drifts from it, this fails
rather than the newcomer. The block is run byte for byte; only when the documented ports are taken
(another emulator on this machine) are the port numbers swapped for free ones.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from abm_emulator.testing import start_emulator

README = Path(__file__).resolve().parents[1] / "README.md"
DOC_PORTS = (8080, 8081)


def _curl_block() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- readme-curl:begin -->\n```bash\n(.*?)```\n<!-- readme-curl:end -->", text, re.S)
    assert match, "README lost its readme-curl block"
    return match.group(1)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed on this machine")
def test_readme_curl_session_works_as_printed(tmp_path: Path) -> None:
    script = _curl_block()
    ports = {"port": DOC_PORTS[0], "storage_port": DOC_PORTS[1]}
    if not all(_port_free(p) for p in DOC_PORTS):
        ports = {"port": 0, "storage_port": 0}
    with start_emulator(api_keys=["my-key"], **ports) as emu:
        api_port = emu.base_url.rsplit(":", 1)[1]
        script = script.replace(f"127.0.0.1:{DOC_PORTS[0]}", f"127.0.0.1:{api_port}")
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '"addedAccounts":1' in out and '"accountsNotFound":[{"id":"not-an-account"' in out
    assert '"estimatedAccountsCount":"1"' in out
    assert '"schedule":"0 6 * * *"' in out
    lines = out.splitlines()
    assert "409" in lines
    assert '"status":"FAILED_PRECONDITION"' in out and '"field":"schedule"' in out
    assert "date,campaign_id,campaign_name,tactic_id,tactic_name,impressions,clicks,spend" in lines
    assert lines[-1] == "400"
    assert (tmp_path / "tactic_performance.csv").stat().st_size > 1000
