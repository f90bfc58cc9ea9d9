"""Peak memory of adding accounts does not grow with the source: rows stream in batches of 1000.

Each size runs in its own process (``support.processes.operator_peak``) so only the operator's own
memory is measured, against the emulator, from a CSV and a Parquet file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from abm_provider.operators.account_lists import CreateAccountListFolderOperator, CreateAccountListOperator
from support.processes import operator_peak


def _write(path: Path, rows: int) -> Path:
    table = pa.table(
        {
            "id": [f"001{n:012d}" for n in range(rows)],
            "name": [f"Company {n}, Inc" for n in range(rows)],
        }
    )
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=10_000)
    else:
        pacsv.write_csv(table, path)
    return path


def _run(abm: Any, rows: int, suffix: str, tmp_path: Path) -> tuple[float, dict[str, Any]]:
    ctx: dict[str, Any] = {}
    folder = CreateAccountListFolderOperator(task_id="f", folder_name="memory").execute(ctx)
    lst = CreateAccountListOperator(
        task_id="l", list_name=f"{rows}{suffix}", folder_id=folder["folderId"]
    ).execute(ctx)
    source = _write(tmp_path / f"accounts-{rows}{suffix}", rows)
    return operator_peak(
        "abm_provider.operators.account_lists:AddAccountsToListOperator",
        {
            "list_id": lst["listId"],
            "accounts_path": str(source),
            "default_crm_org_id": "00D000000000001",
            "rejects_base": str(tmp_path / "rejects"),
        },
    )


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_peak_memory_does_not_grow_with_source_size(abm: Any, tmp_path: Path, suffix: str) -> None:
    small_peak, small = _run(abm, 10_000, suffix, tmp_path)
    large_peak, large = _run(abm, 200_000, suffix, tmp_path)
    assert small["added"] == 10_000 and large["added"] == 200_000 and large["batches"] == 200
    print(f"{suffix}: peak {small_peak:.0f} MiB for 10k accounts, {large_peak:.0f} MiB for 200k")
    # Twenty times the rows may cost a few more buffers, never an amount proportional to the rows
    # (200k accounts held as dicts would be well over 100 MiB).
    assert large_peak - small_peak < 24, f"{small_peak:.0f} MiB for 10k, {large_peak:.0f} MiB for 200k"
