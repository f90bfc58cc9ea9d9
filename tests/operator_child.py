"""Run one operator in a fresh process and print its XCom value with the process's peak memory.

Memory tests run each size in its own process so the test runner's memory does not mix into the
figure. argv: ``module:Class`` and the operator's keyword arguments as JSON; connections come from
the inherited ``AIRFLOW_CONN_*`` variables. The last stdout line is ``{"result": ..., "peak_kib": N}``.
"""

from __future__ import annotations

import importlib
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
    target, kwargs = sys.argv[1], json.loads(sys.argv[2])
    module, _, name = target.partition(":")
    operator_class = getattr(importlib.import_module(module), name)
    ti = SimpleNamespace(dag_id="memory", task_id="task", run_id="manual__memory", try_number=1, map_index=-1)
    context = {"ti": ti, "task_instance": ti, "run_id": "manual__memory"}
    result = operator_class(task_id="task", **kwargs).execute(context)
    print(json.dumps({"result": result, "peak_kib": peak_kib()}, default=str))


if __name__ == "__main__":
    main()
