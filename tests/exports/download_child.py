"""Run one download in a fresh process and print its result with the process's peak memory.

Used by the memory test and kept separate so the parent's memory (test runner, other tests) does not
mix into the figure. Reads the execution as JSON from argv[1] and the destination folder from argv[2];
the connection comes from the inherited AIRFLOW_CONN_ABM_DEFAULT.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def peak_kib() -> int:
    """This process's own peak RSS (VmHWM).

    Not ``getrusage().ru_maxrss``: Linux carries the parent's high-water mark across fork and exec,
    so a child started from a large test runner would report the runner's memory, not its own.
    """
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    execution = json.loads(sys.argv[1])
    base = sys.argv[2]
    to_parquet = len(sys.argv) > 3 and sys.argv[3] == "parquet"
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    ti = SimpleNamespace(
        dag_id="memory", task_id="download", run_id="manual__memory", try_number=1, map_index=-1
    )
    context = {"ti": ti, "task_instance": ti, "run_id": "manual__memory"}
    before = peak_kib()
    result = DownloadExecutionCsvOperator(
        task_id="download", execution=execution, base=base, to_parquet=to_parquet
    ).execute(context)  # type: ignore[arg-type]
    peak = peak_kib()
    print(json.dumps({"result": result, "peak_kib": peak, "before_kib": before}))


if __name__ == "__main__":
    main()
