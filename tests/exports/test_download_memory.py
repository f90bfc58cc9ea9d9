"""Peak memory of a download stays flat whatever the file size (streamed in chunks, never held whole)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from abm_provider.operators.exports import CreateExportJobOperator
from support.export_files import EXPORT_TYPE
from support.processes import operator_peak

MiB = 1 << 20


def _peak_mib(abm: Any, size: int, tmp_path: Path, fmt: str = "csv") -> tuple[float, dict[str, Any]]:
    from abm_provider.hooks.abm import AbmHook

    fired = abm.fire(EXPORT_TYPE, outcome="COMPLETE", sizeBytes=size)
    execution = next(e for e in AbmHook("abm_default").iter_executions(EXPORT_TYPE) if e["id"] == fired["id"])
    return operator_peak(
        "abm_provider.operators.exports:DownloadExecutionCsvOperator",
        {"execution": execution, "base": str(tmp_path / f"{size}-{fmt}"), "to_parquet": fmt == "parquet"},
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "small_mib", "large_mib"),
    [
        ("csv", 50, 1024),
        # Parquet holds one row group (16 MiB of Arrow data) plus the writer's buffers, so both sizes
        # are past that fixed cost; 4x the data must then cost no more memory.
        ("parquet", 100, 400),
    ],
)
def test_peak_memory_is_flat(
    abm: Any, context: dict[str, Any], tmp_path: Path, fmt: str, small_mib: int, large_mib: int
) -> None:
    CreateExportJobOperator(task_id="job", export_type=EXPORT_TYPE, schedule="0 5 1 1 *").execute(context)
    small_peak, small = _peak_mib(abm, small_mib * MiB, tmp_path, fmt)
    large_peak, large = _peak_mib(abm, large_mib * MiB, tmp_path, fmt)
    ratio = large_mib // small_mib
    assert large["bytes"] >= 0.95 * ratio * small["bytes"]  # the large file really is that much larger
    print(f"{fmt}: peak {small_peak:.0f} MiB for {small_mib} MiB, {large_peak:.0f} MiB for {large_mib} MiB")
    # More data may cost a few more buffers, never a size-proportional amount.
    assert large_peak - small_peak < 64, (
        f"peak {small_peak:.0f} MiB for {small_mib} MiB, {large_peak:.0f} MiB for {large_mib} MiB"
    )
