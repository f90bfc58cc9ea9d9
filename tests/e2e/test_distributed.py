"""The distributed run (`make e2e`) as part of the test suite: it needs PostgreSQL and Redis, which CI has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = 3


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(900)
def test_both_dags_succeed_on_celery_workers_with_a_triggerer() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "e2e.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=840,
    )
    if result.returncode == SKIPPED:
        reason = result.stdout.strip().splitlines()[-1]
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the e2e, but it skipped: {reason}")
        pytest.skip(reason)
    assert result.returncode == 0, result.stdout[-15000:] + result.stderr[-5000:]
    # The wall time, the task -> worker table and the deferral evidence, for `pytest -rP`.
    print(result.stdout[result.stdout.find("\ntask ") :])
