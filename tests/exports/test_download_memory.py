"""Peak memory of a download stays flat whatever the file size (streamed in chunks, never held whole)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from export_helpers import EXPORT_TYPE

from abm_provider.operators.exports import CreateExportJobOperator

MiB = 1 << 20
CHILD = Path(__file__).with_name("download_child.py")


def _peak_mib(abm: Any, size: int, tmp_path: Path, fmt: str = "csv") -> tuple[float, dict[str, Any]]:
    from abm_provider.hooks.abm import AbmHook

    fired = abm.fire(EXPORT_TYPE, outcome="COMPLETE", sizeBytes=size)
    execution = next(e for e in AbmHook("abm_default").iter_executions(EXPORT_TYPE) if e["id"] == fired["id"])
    out = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(execution), str(tmp_path / f"{size}-{fmt}"), fmt],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return report["peak_kib"] / 1024, report["result"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_peak_memory_is_flat(abm: Any, context: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    CreateExportJobOperator(task_id="job", export_type=EXPORT_TYPE, schedule="0 5 1 1 *").execute(context)
    small_peak, small = _peak_mib(abm, 20 * MiB, tmp_path, fmt)
    large_peak, large = _peak_mib(abm, 400 * MiB, tmp_path, fmt)
    assert large["bytes"] >= 19 * small["bytes"]  # the large file really is ~20x larger
    # Twenty times the data may cost a few more buffers, never a size-proportional amount.
    print(f"{fmt}: peak {small_peak:.0f} MiB for 20 MiB, {large_peak:.0f} MiB for 400 MiB")
    assert large_peak - small_peak < 64, (
        f"peak {small_peak:.0f} MiB for 20 MiB, {large_peak:.0f} MiB for 400 MiB"
    )
