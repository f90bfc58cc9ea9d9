"""Run one download in a fresh process and print its result with the process's peak memory.

Used by the memory test and kept separate so the parent's memory (test runner, other tests) does not
mix into the figure. Reads the execution as JSON from argv[1] and the destination folder from argv[2];
the connection comes from the inherited AIRFLOW_CONN_ABM_DEFAULT.
"""

from __future__ import annotations

import json
import resource
import sys
from types import SimpleNamespace


def main() -> None:
    execution = json.loads(sys.argv[1])
    base = sys.argv[2]
    to_parquet = len(sys.argv) > 3 and sys.argv[3] == "parquet"
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    ti = SimpleNamespace(
        dag_id="memory", task_id="download", run_id="manual__memory", try_number=1, map_index=-1
    )
    context = {"ti": ti, "task_instance": ti, "run_id": "manual__memory"}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = DownloadExecutionCsvOperator(
        task_id="download", execution=execution, base=base, to_parquet=to_parquet
    ).execute(context)  # type: ignore[arg-type]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"result": result, "peak_kib": peak, "before_kib": before}))


if __name__ == "__main__":
    main()
