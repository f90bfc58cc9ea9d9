"""What ``scripts/bench.py`` and its sections in other modules share: the PostgreSQL server, the
connection ids, the log line, the figures' helpers, and the first-and-second-run loop of the sync and
audiences sections. A module of its own, below both, so no section module imports ``bench.py``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

# The PostgreSQL server (no database part); the suite creates and uses its own database on it.
PG_SERVER = urlsplit(os.environ.get("ABM_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432"))
PG_DATABASE = os.environ.get("ABM_BENCH_PG_DATABASE", "abm_bench")
PG_ADMIN_DSN = PG_SERVER._replace(path="/postgres").geturl()
PG_DSN = PG_SERVER._replace(path=f"/{PG_DATABASE}").geturl()

ABM_CONN = "abm_default"
POSTGRES_CONN = "bench_postgres"
# The emulator's request log keeps this many requests; past it, a run's request count is a floor.
REQUEST_LOG_SIZE = 5000
#: The warehouses of the sync and audiences sections: the state connection's kind and its label.
SYNC_WAREHOUSES = (("duckdb", "DuckDB"), ("postgres", "PostgreSQL"))
#: Their kinds, as ``--sync-warehouse`` names them.
SYNC_WAREHOUSE_NAMES = tuple(name for name, _ in SYNC_WAREHOUSES)


def human_count(count: float) -> str:
    if count >= 1e6:
        return f"{count / 1e6:.2f}M"
    if count >= 1e3:
        return f"{count / 1e3:.1f}k"
    return f"{count:.0f}"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def median_figures(
    runs: list[dict[str, Any]], derive: Callable[[dict[str, Any]], dict[str, float]]
) -> dict[str, float]:
    """Per-run figures, then the median of each across runs."""
    per_run = [derive(r) for r in runs]
    return {key: statistics.median(f[key] for f in per_run) for key in per_run[0]}


def mib(kib: float) -> float:
    return kib / 1024


def psql(dsn: str, *commands: str) -> str:
    args = ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", dsn]
    for command in commands:
        args += ["-c", command]
    done = subprocess.run(args, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"psql {dsn} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.strip()


def ensure_pg_database() -> None:
    exists = psql(PG_ADMIN_DSN, f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'")
    if exists != "1":
        psql(PG_ADMIN_DSN, f"CREATE DATABASE {PG_DATABASE}")


def account_id_sql(number: str) -> str:
    """An account id the emulator knows (``001`` and 15 digits), in SQL both DuckDB and PostgreSQL run."""
    return f"'001' || lpad(CAST({number} AS VARCHAR), 15, '0')"


def repeat_first_and_second(bench: Any, section: Any, repeats: int) -> None:
    """On each warehouse of :data:`SYNC_WAREHOUSES` (those ``--sync-warehouse`` names, when given),
    ``repeats`` times: ``section`` seeds its source, times the bare request loop and its first and
    second runs; then it reports, per warehouse, so that a failure on the second keeps the first's
    figures. The sync and audiences sections share it."""
    chosen = bench.args.sync_warehouse or SYNC_WAREHOUSE_NAMES
    with bench.emulator() as emulator:
        for warehouse, label in SYNC_WAREHOUSES:
            if warehouse not in chosen:
                continue
            runs: dict[str, list[dict[str, Any]]] = {"first": [], "second": [], "bare": []}
            try:
                for number in range(1, repeats + 1):
                    section.seed(warehouse)
                    bare = section.bare(emulator, warehouse)
                    first, second = section.first_and_second(emulator, warehouse)
                    runs["first"].append(first)
                    runs["second"].append(second)
                    runs["bare"].append(bare)
                    log(
                        f"  run {number}/{repeats} {warehouse:<8} bare loop {bare['seconds']:6.1f} s; "
                        f"first {first['seconds']:6.1f} s, "
                        f"peak RSS {mib(first['peak_rss_kib']):4.0f} MiB; second "
                        f"{second['seconds']:6.1f} s, peak RSS {mib(second['peak_rss_kib']):4.0f} MiB"
                    )
            finally:
                section.clean(warehouse)
            section.report(label, runs)


def membership_requests(emulator: Any) -> dict[str, Any]:
    """The add and remove requests the emulator saw since its log was cleared (``requests``), and
    whether its log, which keeps the last :data:`REQUEST_LOG_SIZE`, held them all."""
    seen = emulator.requests_seen()
    requests = sum(
        1 for r in seen if r["method"] == "POST" and r["path"].endswith(("/accounts/add", "/accounts/remove"))
    )
    return {"requests": requests, "requests_complete": len(seen) < REQUEST_LOG_SIZE}
