"""Run one AddAccountsToListOperator over a file in a fresh process; print its summary and peak memory.

A separate process keeps the test runner's own memory out of the figure. argv: list id, source file,
rejects folder. The connection comes from the inherited AIRFLOW_CONN_ABM_DEFAULT.
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
    list_id, source, rejects_base = sys.argv[1:4]
    from abm_provider.operators.account_lists import AddAccountsToListOperator

    ti = SimpleNamespace(dag_id="memory", task_id="add", run_id="manual__memory", try_number=1, map_index=-1)
    context = {"ti": ti, "task_instance": ti, "run_id": "manual__memory"}
    summary = AddAccountsToListOperator(
        task_id="add",
        list_id=list_id,
        accounts_path=source,
        default_crm_org_id="00D000000000001",
        rejects_base=rejects_base,
    ).execute(context)  # type: ignore[arg-type]
    print(json.dumps({"summary": summary, "peak_kib": peak_kib()}))


if __name__ == "__main__":
    main()
