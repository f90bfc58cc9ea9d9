"""The distributed run (`make e2e`) as part of the test suite: it needs PostgreSQL and Redis, which CI has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
    if result.returncode == 3:
        pytest.skip(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, result.stdout[-15000:] + result.stderr[-5000:]
