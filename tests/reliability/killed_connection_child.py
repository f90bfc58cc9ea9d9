"""A task process whose PostgreSQL connection is killed mid-stream, load after load; run by
``test_task_exits.py`` as ``python killed_connection_child.py ARGS_JSON``.

Each load streams an export from a paced server (``ExecutionCsvToSqlOperator`` given the link) and,
two chunks into the ``COPY``, terminates its own backend from a second connection
(``pg_terminate_backend``), as a DBA, a failover or an idle-session killer would. After every load
the child prints one JSON line: how ``execute()`` ended. At the end it prints how many readers are
still blocked on a pipe of the stream, then ``ENDED``, and returns from ``main``: the interpreter's
exit then waits for every non-daemon thread, Arrow's I/O threads among them, so a reader left blocked
shows up as a process that never exits.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import psycopg


def count_blocked_readers() -> list[Any]:
    """Patch :class:`BytePipe` so each pipe counts the reads waiting on its queue; the pipes made."""
    from abm_provider.exports import pipe

    made: list[Any] = []
    original = pipe.BytePipe.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.blocked = 0
        real_get = self._queue.get

        def get(*a: Any, **k: Any) -> Any:
            self.blocked += 1
            try:
                return real_get(*a, **k)
            finally:
                self.blocked -= 1

        self._queue.get = get
        made.append(self)

    pipe.BytePipe.__init__ = init  # type: ignore[method-assign]
    return made


def kill_the_copy_midway(dsn: str, schema: str) -> None:
    """Two chunks into each ``COPY``, terminate the backend running it (this child's own)."""
    from abm_provider.warehouse.dialects import postgres

    original = postgres._progress

    def _progress(*args: Any, **kwargs: Any) -> Any:
        for number, chunk in enumerate(original(*args, **kwargs)):
            if number == 2:
                with psycopg.connect(dsn, autocommit=True) as admin:
                    killed = admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE pid <> pg_backend_pid() AND query LIKE 'COPY %%' AND query LIKE %s",
                        [f"%{schema}%"],
                    ).fetchall()
                assert killed == [(True,)], f"expected to terminate one COPY, got {killed}"
            yield chunk

    postgres._progress = _progress  # type: ignore[assignment]


def main() -> None:
    args = json.loads(sys.argv[1])
    pipes = count_blocked_readers()
    kill_the_copy_midway(args["dsn"], args["schema"])
    from abm_provider.transfers.csv_to_sql import ExecutionCsvToSqlOperator

    for rep in range(args["repetitions"]):
        operator = ExecutionCsvToSqlOperator(
            task_id=f"killed_{rep}",
            source={"downloadUri": args["url"]},
            export_type="TACTIC_PERFORMANCE",
            sql_conn_id=args["conn_id"],
            table=args["table"],
            archive=f"{args['folder']}/archive-{rep}.csv",
        )
        try:
            operator.execute(context={})
            outcome: dict[str, Any] = {"rep": rep, "ended": "returned"}
        except Exception as exc:
            outcome = {"rep": rep, "ended": "raised", "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps(outcome), flush=True)
    # No pipe is written again: a reader still waiting on one after a few seconds waits for good (a
    # woken reader leaves within milliseconds; the bound only lets the last one be scheduled).
    deadline = time.monotonic() + 5
    while (blocked := sum(pipe.blocked for pipe in pipes)) and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    print(json.dumps({"pipes": len(pipes), "blocked_readers": blocked}), flush=True)
    print("ENDED", flush=True)


if __name__ == "__main__":
    main()
