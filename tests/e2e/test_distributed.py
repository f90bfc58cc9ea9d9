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
@pytest.mark.parametrize(
    "scenario",
    [
        # The daily export with its deferred sensor, and the list sync, on two Celery workers.
        "dags",
        # The event-driven export: one run per completed execution, two at once both loaded, a
        # restarted triggerer fires nothing old, the table equals loading one by one.
        "events",
    ],
)
def test_the_example_dags_succeed_on_celery_workers_with_a_triggerer(scenario: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "e2e.py"), "--scenario", scenario],
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
    # The checks, and for the dags scenario the task -> worker table and the deferral evidence,
    # for `pytest -rP`.
    print("\n".join(line for line in result.stdout.splitlines() if line.startswith("[e2e")))
