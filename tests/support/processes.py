"""A task in a process of its own: killed for real at a chosen point, or measured for peak memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

#: Runs one operator and prints its XCom with the process's peak memory (see its docstring).
OPERATOR_CHILD = Path(__file__).parents[1] / "operator_child.py"

# The marker is written whole and then renamed into place: the test polls for it, and a plain
# write_text lets the poll see the file after it is created but before its text is written.
_CHILD = """
import json, os, sys, time
from pathlib import Path
marker = Path(sys.argv[1])
def announce(text):
    partial = marker.with_name(marker.name + ".partial")
    partial.write_text(text)
    os.replace(partial, marker)
def wait_to_be_killed():
    announce("ready")
    time.sleep(600)
{patch}
{body}
announce("finished")
"""


def run_until_killed(tmp_path: Path, patch: str, body: str, args: Mapping[str, Any]) -> None:
    """Run ``body`` in a fresh interpreter with ``patch`` applied and SIGKILL it at the patched point.

    The patch calls ``wait_to_be_killed()`` where the crash should land; the child then announces
    itself in a marker file and sleeps, and is killed with no chance to clean up (no ``finally``, no
    rollback, no atexit). ``body`` sees the JSON ``args`` as ``kwargs``.
    """
    marker = tmp_path / f"marker-{uuid.uuid4().hex[:8]}"
    script = _CHILD.format(
        patch=textwrap.dedent(patch), body="kwargs = json.loads(sys.argv[2])\n" + textwrap.dedent(body)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(marker), json.dumps(dict(args))],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if proc.poll() is not None:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                pytest.fail(f"the task exited before the crash point: {stderr[-3000:]}")
            assert time.monotonic() < deadline, "the task never reached the crash point"
            time.sleep(0.02)
        assert marker.read_text() == "ready", "the task finished instead of stopping at the crash point"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def operator_peak(target: str, kwargs: Mapping[str, Any]) -> tuple[float, Any]:
    """Run the operator ``module:Class`` with ``kwargs`` in a fresh process: its peak RSS (MiB), its XCom."""
    out = subprocess.run(
        [sys.executable, str(OPERATOR_CHILD), target, json.dumps(dict(kwargs))],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return report["peak_kib"] / 1024, report["result"]
