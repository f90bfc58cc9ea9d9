"""`make bench`: the provider against the ceiling and against what users write by hand.

Seven sections, each against a real emulator process on free loopback ports (issue 8):

1. ``export``: a TACTIC_PERFORMANCE export downloaded and loaded into DuckDB and PostgreSQL by one
   ``ExecutionCsvToSqlOperator`` given the execution (the example DAG; it loads while it downloads),
   beside the ceiling (``curl`` to a file, then DuckDB ``read_csv`` / ``psql \\copy``), the two-task
   form (``DownloadExecutionCsvOperator``, then the load of the file) and the hand-written
   ``requests`` + ``pandas`` + ``to_sql`` baseline on a smaller export; then the provider on a 4x
   larger export for peak memory.
2. ``lists``: accounts from a DuckDB table to a list with ``AddAccountsToListOperator`` beside a bare
   ``requests.Session`` loop posting the same 1000-account batches.
3. ``waiting``: N ``ExecutionCompleteTrigger``s in one event loop until their execution completes,
   beside one poke-mode sensor process (what each of N worker slots would hold).
4. ``startup``: import time of ``abm_provider`` on top of ``airflow.sdk``, and parse time of each DAG
   file in ``dags/``.
5. ``sync``: ``AccountListSyncOperator`` keeping a list in step with a 1,000,000-row table, state tables
   beside it (DuckDB, then PostgreSQL): the first run into an empty list, then, after 1% of the rows
   changed (half left, as many new ones joined), the second run; time and peak RSS of each side by side.
6. ``cloud``: a 100 MiB export loaded into Snowflake (fakesnow) and into BigQuery (bqemulator), each by
   its bulk path and by the generic ``executemany`` path, each into an empty database or dataset: the
   ratio of the two per warehouse.
7. ``audiences``: ``AccountAudienceSyncOperator`` tiering 1,000,000 accounts over three lists (10%, 30%,
   60%), 50,000 customers excluded, state tables beside them (DuckDB, then PostgreSQL): the first run
   into three empty lists beside the bare request loop posting the same accounts, then, after 1% of
   the accounts moved between tiers, the second run (``scripts/bench_audiences.py``).

Every measured case runs in its own child process (``scripts/bench_cases.py``) so that its peak RSS
(``VmHWM``) and CPU time are its own, and each figure is the median of ``--runs`` runs, the pairs
interleaved run by run (the sync's two runs: ``--sync-runs`` repetitions, 1 by default, as one
takes minutes at full size; the audience sync's: ``--audience-runs``, also 1). A table is printed
and written as JSON and Markdown to ``--output-dir``.
A benchmark, not a test: targets missed are reported, the exit status is 0 unless a case fails.

    .venv/bin/python scripts/bench.py                   # full sizes (1 GiB / 4 GiB, 200k / 1M, 1000, 1M)
    .venv/bin/python scripts/bench.py --quick           # small sizes, about 2 minutes
    .venv/bin/python scripts/bench.py --only export --runs 5
    .venv/bin/python scripts/bench.py --only sync       # the list sync alone, about 5 minutes
    .venv/bin/python scripts/bench.py --only audiences  # the audience sync alone, about 3 minutes

Needs ``curl``, ``psql`` and a PostgreSQL server: ``ABM_BENCH_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432``); the suite creates database ``ABM_BENCH_PG_DATABASE``
(default ``abm_bench``) there and drops only its own ``bench_*`` tables, the load ledger and the
sync's ``abm_sync_*`` and the audience sync's ``abm_aud_*`` state tables in it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import bench_cases
from bench_audiences import AudienceSection
from bench_report import ROOT, Check, Row, machine_info, render_markdown, render_text
from bench_support import (
    ABM_CONN,
    PG_ADMIN_DSN,
    PG_DATABASE,
    PG_DSN,
    PG_SERVER,
    POSTGRES_CONN,
    SYNC_WAREHOUSE_NAMES,
    account_id_sql,
    ensure_pg_database,
    human_count,
    log,
    median_figures,
    membership_requests,
    mib,
    psql,
    repeat_first_and_second,
)
from measure_storage import parse_size

MiB = 1 << 20
EXPORT_TYPE = "TACTIC_PERFORMANCE"
SECTIONS = ("export", "lists", "waiting", "startup", "sync", "cloud", "audiences")
#: The cloud section's warehouses, each on its emulator.
CLOUD_WAREHOUSES = ("snowflake", "bigquery")
SQLALCHEMY_URL = PG_SERVER._replace(scheme="postgresql+psycopg2", path=f"/{PG_DATABASE}").geturl()
DUCKDB_CONN = "bench_duckdb"
ACCOUNTS_CONN = "bench_accounts"
SYNC_DUCKDB_CONN = "bench_sync_duckdb"
# The part of the sync's source that changes between its first and second run.
SYNC_CHANGED = 0.01
LEDGER_TABLE = "abm_load_ledger"
# The DuckDB loads' memory_limit unless --duckdb-memory-limit says otherwise.
DUCKDB_MEMORY_LIMIT = "256MB"


def dialect_options(warehouse: str, memory_limit: str | None, threads: int | None) -> dict[str, Any] | None:
    """The load's ``dialect_options``: on DuckDB the bench's memory limit, and threads when given; none
    elsewhere (PostgreSQL's dialect has no options, and refuses these)."""
    return {"memory_limit": memory_limit, "threads": threads} if warehouse == "duckdb" else None


class Section(Protocol):
    """One of the five parts of the suite: runs its cases, then adds rows and checks to the bench."""

    def run(self) -> None: ...


@dataclass(frozen=True)
class Sizes:
    """What one invocation measures; ``--quick`` shrinks everything so the suite runs in minutes."""

    export: int
    export_big: int
    baseline: int
    accounts: tuple[int, ...]
    triggers: int
    poll_interval: float
    poll_rounds: int
    sync_rows: int
    cloud: int
    audience_rows: int
    audience_exclusions: int


FULL = Sizes(
    2**30, 4 * 2**30, 100 * MiB, (200_000, 1_000_000), 1000, 10.0, 3, 1_000_000, 100 * MiB, 1_000_000, 50_000
)
QUICK = Sizes(20 * MiB, 80 * MiB, 5 * MiB, (5_000,), 50, 1.0, 3, 20_000, 2 * MiB, 20_000, 1_000)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (20 MiB, 5k accounts, 50 triggers, 20k sync rows)"
    )
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="run only this section (repeatable)"
    )
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (default 3; 2 with --quick)")
    parser.add_argument(
        "--big-runs", type=int, default=1, help="runs of the 4x larger export (peak RSS only)"
    )
    parser.add_argument("--export-size", type=parse_size, default=None, help="export size, e.g. 1GiB")
    parser.add_argument("--big-export-size", type=parse_size, default=None, help="large export size (4GiB)")
    parser.add_argument(
        "--baseline-size", type=parse_size, default=None, help="pandas baseline size (100MiB)"
    )
    parser.add_argument("--accounts", type=int, action="append", help="accounts to sync (repeatable)")
    parser.add_argument("--triggers", type=int, default=None, help="concurrent triggers (default 1000)")
    parser.add_argument(
        "--sync-rows", type=int, default=None, help="source rows of the list sync (default 1000000)"
    )
    parser.add_argument(
        "--sync-runs", type=int, default=1, help="repetitions of the list sync's first + second run"
    )
    parser.add_argument(
        "--audience-rows", type=int, default=None, help="accounts of the audience sync (default 1000000)"
    )
    parser.add_argument(
        "--audience-exclusions", type=int, default=None, help="of them excluded as customers (default 50000)"
    )
    parser.add_argument(
        "--audience-runs", type=int, default=1, help="repetitions of the audience sync's first + second run"
    )
    parser.add_argument(
        "--sync-warehouse",
        action="append",
        choices=SYNC_WAREHOUSE_NAMES,
        help="the sync and audiences sections' warehouse (repeatable; default: both)",
    )
    parser.add_argument(
        "--cloud-warehouse",
        action="append",
        choices=CLOUD_WAREHOUSES,
        help="the cloud section's warehouse (repeatable; default: both)",
    )
    parser.add_argument(
        "--cloud-size", type=parse_size, default=None, help="export size of the cloud section (100MiB)"
    )
    parser.add_argument("--poll-interval", type=float, default=None, help="trigger poll interval, seconds")
    parser.add_argument(
        "--duckdb-memory-limit", default=DUCKDB_MEMORY_LIMIT, help="DuckDB memory_limit for the loads"
    )
    parser.add_argument("--duckdb-threads", type=int, default=None, help="DuckDB threads (default: DuckDB's)")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument(
        "--profile", type=Path, default=None, help="run every case under cProfile, .pstats files go here"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: temporary)")
    return parser.parse_args(argv)


def sizes_from(args: argparse.Namespace) -> Sizes:
    base = QUICK if args.quick else FULL
    return Sizes(
        export=args.export_size or base.export,
        export_big=args.big_export_size or base.export_big,
        baseline=args.baseline_size or base.baseline,
        accounts=tuple(args.accounts or base.accounts),
        triggers=args.triggers or base.triggers,
        poll_interval=args.poll_interval or base.poll_interval,
        poll_rounds=base.poll_rounds,
        sync_rows=args.sync_rows or base.sync_rows,
        cloud=args.cloud_size or base.cloud,
        audience_rows=args.audience_rows or base.audience_rows,
        audience_exclusions=args.audience_exclusions or base.audience_exclusions,
    )


def human_bytes(size: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", MiB), ("KiB", 1024)):
        if size >= factor:
            value = size / factor
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"


# ---------------------------------------------------------------------------------------- plumbing


def case_env(work: Path) -> dict[str, str]:
    """What every case process gets: a scratch Airflow home and state dir, and the PostgreSQL
    connection (the others are added as a section starts what they point at)."""
    postgres = {
        "conn_type": "postgres",
        "host": PG_SERVER.hostname or "127.0.0.1",
        "port": PG_SERVER.port or 5432,
        "login": PG_SERVER.username or "postgres",
        "password": PG_SERVER.password,
        "schema": PG_DATABASE,
    }
    return {
        **os.environ,
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW__ABM__STATE_DIR": str(work / "state"),
        f"AIRFLOW_CONN_{POSTGRES_CONN.upper()}": json.dumps(postgres),
    }


class Bench:
    """Shared state of one invocation: scratch folders, child environment and the collected rows."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.sizes = sizes_from(args)
        self.runs = args.runs or (2 if args.quick else 3)
        self.work = work
        self.rows: list[Row] = []
        self.checks: list[Check] = []
        if args.profile is not None:
            os.environ["BENCH_PROFILE_DIR"] = str(args.profile.resolve())
        self.env = case_env(work)

    def run_case(self, case: str, params: dict[str, Any]) -> dict[str, Any]:
        """One case in a fresh interpreter; its ``BENCH_RESULT`` line, or an error with its output."""
        command = [sys.executable, str(Path(bench_cases.__file__)), case, json.dumps(params)]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, cwd=ROOT, check=False)
        lines = [x for x in done.stdout.splitlines() if x.startswith(bench_cases.RESULT_PREFIX)]
        if done.returncode != 0 or not lines:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(
                f"case {case} failed with exit code {done.returncode}: {last[:300]}\n"
                f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-6000:]}"
            )
        result: dict[str, Any] = json.loads(lines[-1][len(bench_cases.RESULT_PREFIX) :])
        return result

    def set_conn(self, name: str, conn: dict[str, Any]) -> None:
        """Connections go to the children (and this process) as ``AIRFLOW_CONN_*`` variables only."""
        value = json.dumps(conn)
        self.env[f"AIRFLOW_CONN_{name.upper()}"] = value
        os.environ[f"AIRFLOW_CONN_{name.upper()}"] = value

    @contextmanager
    def emulator(self, **options: Any) -> Iterator[Any]:
        """An emulator for one section, registered as the ``abm_default`` connection, always stopped."""
        from abm_emulator.testing import start_emulator

        with start_emulator(**options) as emulator:
            self.set_conn(
                ABM_CONN, {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
            )
            yield emulator


def drop_pg_tables() -> None:
    """Every run loads into an empty database, so no run pays for deleting an earlier one's rows."""
    tables = [bench_cases.PROVIDER_TABLE, bench_cases.CEILING_TABLE, bench_cases.BASELINE_TABLE, LEDGER_TABLE]
    psql(PG_DSN, f"DROP TABLE IF EXISTS {', '.join(tables)} CASCADE")


def ratio_check(section: str, name: str, value: float, minimum: float | None, unit: str = "x") -> Check:
    shown = f"{value:.2f}{unit}"
    if minimum is None:
        return Check(section, name, shown, "-", None)
    return Check(section, name, shown, f">= {minimum:g}{unit}", value >= minimum)


def limit_check(section: str, name: str, value: float, maximum: float, unit: str) -> Check:
    return Check(section, name, f"{value:.2f} {unit}", f"< {maximum:g} {unit}", value < maximum)


# ---------------------------------------------------------------------------------------- section 1


def export_figures(run: dict[str, Any]) -> dict[str, float]:
    seconds = max(run["seconds"], 1e-9)
    figures = {
        "mb_per_s": run["bytes"] / seconds / 1e6,
        "rows_per_s": run["rows"] / seconds,
        "peak_rss_mib": mib(run["peak_rss_kib"]),
        "seconds": run["seconds"],
        "bytes": float(run["bytes"]),
        "rows": float(run["rows"]),
    }
    for key in ("download_seconds", "load_seconds"):
        if key in run:
            figures[key] = run[key]
    return figures


def export_row(case: str, size: int, runs: list[dict[str, Any]], notes: str = "") -> Row:
    figures = median_figures(runs, export_figures)
    if "download_seconds" in figures:
        split = f"download {figures['download_seconds']:.1f} s + load {figures['load_seconds']:.1f} s"
        notes = f"{split}; {notes}" if notes else split
    return Row(
        section="export",
        case=case,
        size=human_bytes(size),
        throughput=f"{figures['mb_per_s']:.1f} MB/s, {human_count(figures['rows_per_s'])} rows/s",
        peak_rss=f"{figures['peak_rss_mib']:.0f} MiB",
        seconds=f"{figures['seconds']:.1f} s",
        notes=notes,
        figures=figures,
        runs=runs,
    )


def fire_export(emulator: Any, size: int) -> dict[str, Any]:
    """A COMPLETE execution of ``size`` bytes; the emulator renders its file before answering.

    Posted here rather than through ``emulator.fire`` because rendering 4 GiB can outlast that
    helper's 30 s admin timeout.
    """
    import requests

    response = requests.post(
        f"{emulator.base_url}/_admin/exportJobs/{EXPORT_TYPE}/fire",
        json={"apiKey": emulator.api_key, "outcome": "COMPLETE", "sizeBytes": size},
        timeout=1800,
    )
    response.raise_for_status()
    execution: dict[str, Any] = response.json()
    return execution


class ExportSection:
    """Section 1: provider vs ceiling vs hand-written baseline, into DuckDB and PostgreSQL."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.base = bench.work / "export"
        self.base.mkdir(parents=True, exist_ok=True)
        self.duckdb_path = str(bench.work / "export.duckdb")
        self.main_rows: dict[str, Row] = {}
        bench.set_conn(DUCKDB_CONN, {"conn_type": "duckdb", "host": self.duckdb_path})

    def fire(self, emulator: Any, size: int) -> dict[str, Any]:
        started = time.perf_counter()
        execution = fire_export(emulator, size)
        log(f"  the emulator rendered a {human_bytes(size)} export in {time.perf_counter() - started:.1f} s")
        return execution

    def params(self, execution: dict[str, Any], warehouse: str) -> dict[str, Any]:
        args = self.bench.args
        return {
            "execution": execution,
            "base": str(self.base),
            "export_type": EXPORT_TYPE,
            "conn_id": DUCKDB_CONN if warehouse == "duckdb" else POSTGRES_CONN,
            "duckdb_path": self.duckdb_path if warehouse == "duckdb" else None,
            "dialect_options": dialect_options(warehouse, args.duckdb_memory_limit, args.duckdb_threads),
            "pg_dsn": PG_DSN,
            "sqlalchemy_url": SQLALCHEMY_URL,
        }

    def run_pairs(
        self, execution: dict[str, Any], runs: int, with_ceiling: bool
    ) -> dict[str, list[dict[str, Any]]]:
        """Provider and ceiling, DuckDB then PostgreSQL, interleaved run by run."""
        results: dict[str, list[dict[str, Any]]] = {}
        plan = [
            ("provider_duckdb", "provider_export", "duckdb"),
            ("provider_postgres", "provider_export", "pg"),
        ]
        if with_ceiling:
            plan = [
                ("provider_duckdb", "provider_export", "duckdb"),
                ("ceiling_duckdb", "ceiling_duckdb", "duckdb"),
                ("two_tasks_duckdb", "provider_two_tasks", "duckdb"),
                ("provider_postgres", "provider_export", "pg"),
                ("ceiling_postgres", "ceiling_postgres", "pg"),
                ("two_tasks_postgres", "provider_two_tasks", "pg"),
            ]
        for number in range(1, runs + 1):
            for key, case, warehouse in plan:
                if warehouse == "pg":
                    drop_pg_tables()
                result = self.bench.run_case(case, self.params(execution, warehouse))
                results.setdefault(key, []).append(result)
                log(
                    f"  run {number}/{runs} {key:<17} {result['bytes'] / result['seconds'] / 1e6:7.1f} MB/s, "
                    f"peak RSS {mib(result['peak_rss_kib']):5.0f} MiB"
                )
        return results

    def run_baseline(self, small: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The pandas script and the provider on the same smaller export, interleaved."""
        bench = self.bench
        log(f"export: hand-written baseline on {human_bytes(bench.sizes.baseline)}")
        baseline: list[dict[str, Any]] = []
        provider: list[dict[str, Any]] = []
        for number in range(1, bench.runs + 1):
            drop_pg_tables()
            baseline.append(bench.run_case("baseline_pandas", self.params(small, "pg")))
            drop_pg_tables()
            provider.append(bench.run_case("provider_export", self.params(small, "pg")))
            rate = baseline[-1]["bytes"] / baseline[-1]["seconds"] / 1e6
            log(
                f"  run {number}/{bench.runs} baseline {rate:.1f} MB/s, provider -> PostgreSQL "
                f"{provider[-1]['bytes'] / provider[-1]['seconds'] / 1e6:.1f} MB/s"
            )
        return baseline, provider

    def run(self) -> None:
        bench, sizes = self.bench, self.bench.sizes
        ensure_pg_database()
        try:
            with bench.emulator(link_ttl=10**9, data_dir=str(bench.work / "emulator")) as emulator:
                from abm_provider.hooks.abm import AbmHook

                hook = AbmHook(ABM_CONN)
                hook.create_export_job(EXPORT_TYPE, "0 5 1 1 *")
                hook.close()
                log(f"export: {human_bytes(sizes.export)}, {bench.runs} runs each")
                main = self.run_pairs(self.fire(emulator, sizes.export), bench.runs, with_ceiling=True)
                baseline, provider_small = self.run_baseline(self.fire(emulator, sizes.baseline))
                # Reported now, so that a failure of the long large-export runs keeps these figures.
                self.report(main, baseline, provider_small)
                if bench.args.big_runs > 0:
                    log(f"export: {human_bytes(sizes.export_big)} for peak RSS, {bench.args.big_runs} runs")
                    big_execution = self.fire(emulator, sizes.export_big)
                    self.report_big(self.run_pairs(big_execution, bench.args.big_runs, with_ceiling=False))
        finally:
            drop_pg_tables()
            Path(self.duckdb_path).unlink(missing_ok=True)

    def report(
        self,
        main: dict[str, list[dict[str, Any]]],
        baseline: list[dict[str, Any]],
        provider_small: list[dict[str, Any]],
    ) -> None:
        bench, sizes = self.bench, self.bench.sizes
        rows = {
            "provider_duckdb": export_row(
                "provider -> DuckDB (one task, the example DAG)", sizes.export, main["provider_duckdb"]
            ),
            "ceiling_duckdb": export_row(
                "ceiling: curl + DuckDB read_csv", sizes.export, main["ceiling_duckdb"]
            ),
            "provider_postgres": export_row(
                "provider -> PostgreSQL (one task, loading while downloading)",
                sizes.export,
                main["provider_postgres"],
            ),
            "ceiling_postgres": export_row(
                "ceiling: curl + psql \\copy",
                sizes.export,
                main["ceiling_postgres"],
                "RSS is the Python parent, not psql",
            ),
            "two_tasks_duckdb": export_row(
                "two tasks -> DuckDB: download, then load the file", sizes.export, main["two_tasks_duckdb"]
            ),
            "two_tasks_postgres": export_row(
                "two tasks -> PostgreSQL: download, then load the file",
                sizes.export,
                main["two_tasks_postgres"],
            ),
            "baseline": export_row("baseline: requests + pandas + to_sql", sizes.baseline, baseline),
            "provider_small": export_row("provider -> PostgreSQL", sizes.baseline, provider_small),
        }
        self.main_rows = rows
        bench.rows.extend(rows.values())
        mbps = {k: r.figures["mb_per_s"] for k, r in rows.items()}
        for warehouse, label in (("duckdb", "DuckDB"), ("postgres", "PostgreSQL")):
            provider = rows[f"provider_{warehouse}"]
            bench.checks.append(
                ratio_check(
                    "export",
                    f"{label}: provider / ceiling MB/s",
                    mbps[f"provider_{warehouse}"] / mbps[f"ceiling_{warehouse}"],
                    0.8,
                )
            )
            bench.checks.append(
                ratio_check(
                    "export",
                    f"{label}: provider ({human_bytes(sizes.export)}) / baseline "
                    f"({human_bytes(sizes.baseline)}) MB/s",
                    mbps[f"provider_{warehouse}"] / mbps["baseline"],
                    20,
                )
            )
            bench.checks.append(
                limit_check(
                    "export", f"{label}: provider peak RSS", provider.figures["peak_rss_mib"], 512, "MiB"
                )
            )
        bench.checks.append(
            ratio_check(
                "export",
                f"PostgreSQL: provider / baseline MB/s, both {human_bytes(sizes.baseline)}",
                mbps["provider_small"] / mbps["baseline"],
                20,
            )
        )

    def report_big(self, big: dict[str, list[dict[str, Any]]]) -> None:
        """The large export's rows, and its peak RSS against the main size's."""
        bench, sizes = self.bench, self.bench.sizes
        for warehouse, label in (("duckdb", "DuckDB"), ("postgres", "PostgreSQL")):
            row = export_row(f"provider -> {label}", sizes.export_big, big[f"provider_{warehouse}"])
            bench.rows.append(row)
            growth = (
                row.figures["peak_rss_mib"] / self.main_rows[f"provider_{warehouse}"].figures["peak_rss_mib"]
                - 1
            )
            bench.checks.append(
                Check(
                    "export",
                    f"{label}: peak RSS {human_bytes(sizes.export_big)} vs {human_bytes(sizes.export)}",
                    f"{growth:+.1%}",
                    "within 10%",
                    abs(growth) <= 0.10,
                )
            )
            bench.checks.append(
                limit_check(
                    "export",
                    f"{label}: provider peak RSS at {human_bytes(sizes.export_big)}",
                    row.figures["peak_rss_mib"],
                    512,
                    "MiB",
                )
            )


# ---------------------------------------------------------------------------------------- section 2


def accounts_figures(run: dict[str, Any]) -> dict[str, float]:
    return {
        "accounts_per_s": run["accounts"] / max(run["seconds"], 1e-9),
        "peak_rss_mib": mib(run["peak_rss_kib"]),
        "seconds": run["seconds"],
        "added": float(run["added"]),
    }


class ListSection:
    """Section 2: AddAccountsToListOperator vs a bare requests.Session loop, same rows and batches."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.duckdb_path = str(bench.work / "accounts.duckdb")
        bench.set_conn(ACCOUNTS_CONN, {"conn_type": "duckdb", "host": self.duckdb_path})

    def seed(self, count: int) -> None:
        """``count`` valid accounts (all known to the emulator), in a fresh DuckDB file."""
        import duckdb

        Path(self.duckdb_path).unlink(missing_ok=True)
        with duckdb.connect(self.duckdb_path) as con:
            con.execute(
                "CREATE TABLE bench_accounts AS SELECT "
                "'001' || lpad(CAST(i AS VARCHAR), 15, '0') AS account_id, "
                "'Account ' || i || ', Ltd.' AS account_name, ? AS crm_org_id FROM range(?) t(i)",
                [bench_cases.ORG_ID, count],
            )

    def fresh_list(self, emulator: Any) -> str:
        """Forget earlier runs' members (the emulator keeps them in memory), then a new empty list."""
        from abm_provider.hooks.abm import AbmHook

        emulator.reset()
        hook = AbmHook(ABM_CONN)
        folder = hook.create_folder("bench")
        listed = hook.create_account_list("bench", folder["folderId"])
        hook.close()
        return str(listed["listId"])

    def run(self) -> None:
        bench = self.bench
        with bench.emulator() as emulator:
            for count in bench.sizes.accounts:
                self.seed(count)
                log(f"lists: {count:,} accounts, {bench.runs} runs each")
                results: dict[str, list[dict[str, Any]]] = {"provider": [], "bare": []}
                for number in range(1, bench.runs + 1):
                    for key, case in (("provider", "provider_list_sync"), ("bare", "bare_list_sync")):
                        params = {
                            "list_id": self.fresh_list(emulator),
                            "conn_id": ACCOUNTS_CONN,
                            "duckdb_path": self.duckdb_path,
                            "base": str(bench.work / "state"),
                            "base_url": emulator.base_url,
                            "api_key": emulator.api_key,
                        }
                        result = bench.run_case(case, params)
                        if result["added"] != count:
                            raise RuntimeError(f"{case} added {result['added']} of {count} accounts")
                        results[key].append(result)
                        rate = result["accounts"] / result["seconds"]
                        log(
                            f"  run {number}/{bench.runs} {key:<8} {rate:8.0f} accounts/s, "
                            f"peak RSS {mib(result['peak_rss_kib']):4.0f} MiB"
                        )
                self.report(count, results)
        Path(self.duckdb_path).unlink(missing_ok=True)

    def report(self, count: int, results: dict[str, list[dict[str, Any]]]) -> None:
        bench = self.bench
        figures = {k: median_figures(v, accounts_figures) for k, v in results.items()}
        labels = {"provider": "AddAccountsToListOperator (SQL source)", "bare": "bare requests.Session loop"}
        for key, fig in figures.items():
            bench.rows.append(
                Row(
                    "lists",
                    labels[key],
                    f"{count:,} accounts",
                    f"{fig['accounts_per_s']:,.0f} accounts/s",
                    f"{fig['peak_rss_mib']:.0f} MiB",
                    f"{fig['seconds']:.1f} s",
                    "batches of 1000",
                    fig,
                    results[key],
                )
            )
        ratio = figures["provider"]["accounts_per_s"] / figures["bare"]["accounts_per_s"]
        bench.checks.append(ratio_check("lists", f"provider / bare accounts/s at {count:,}", ratio, 0.8))
        if count == max(bench.sizes.accounts):
            bench.checks.append(
                limit_check(
                    "lists",
                    f"provider peak RSS at {count:,}",
                    figures["provider"]["peak_rss_mib"],
                    300,
                    "MiB",
                )
            )


# ---------------------------------------------------------------------------------------- section 3


class WaitingSection:
    """Section 3: N triggers in one event loop vs N poke-mode sensors each holding a worker slot."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def run(self) -> None:
        bench, sizes = self.bench, self.bench.sizes
        with bench.emulator(link_ttl=10**9) as emulator:
            from abm_provider.hooks.abm import AbmHook

            hook = AbmHook(ABM_CONN)
            hook.create_export_job(EXPORT_TYPE, "0 5 1 1 *")
            hook.close()
            params = {
                "base_url": emulator.base_url,
                "api_key": emulator.api_key,
                "export_type": EXPORT_TYPE,
                "count": sizes.triggers,
                "poll_interval": sizes.poll_interval,
                "rounds": sizes.poll_rounds,
            }
            log(
                f"waiting: {sizes.triggers} triggers, poll every {sizes.poll_interval:g} s, {bench.runs} runs"
            )
            runs: list[dict[str, Any]] = []
            for number in range(1, bench.runs + 1):
                result = bench.run_case("triggers", params)
                if result["successes"] != sizes.triggers:
                    raise RuntimeError(f"triggers ended with {result['status_after']}, not all success")
                runs.append(result)
                log(
                    f"  run {number}/{bench.runs} {result['poll_rounds']:.1f} rounds, "
                    f"{result['steady_cpu_per_round']:.3f} CPU s/steady round "
                    f"(first {result['first_round_cpu']:.3f}), +{mib(result['added_rss_kib']):.0f} MiB"
                )
            # The sensor pokes while a newer execution is still running, as it would while waiting.
            after = emulator.clock()["now"]
            emulator.fire(EXPORT_TYPE, outcome="COMPLETE", runningSeconds=10**7)
            poke_runs = [
                bench.run_case(
                    "poke_sensor", {"export_type": EXPORT_TYPE, "pokes": 20, "updated_after": after}
                )
                for _ in range(bench.runs)
            ]
        self.report(runs, poke_runs)

    def report(self, runs: list[dict[str, Any]], poke_runs: list[dict[str, Any]]) -> None:
        bench, n = self.bench, self.bench.sizes.triggers
        fig = median_figures(
            runs,
            lambda r: {
                "cpu_per_round": r["cpu_per_round"],
                "first_round_cpu": r["first_round_cpu"],
                "steady_cpu_per_round": r["steady_cpu_per_round"],
                "added_rss_mib": mib(r["added_rss_kib"]),
                "loop_peak_rss_mib": mib(r["loop_peak_rss_kib"]),
                "idle_rss_mib": mib(r["idle_rss_kib"]),
                "poll_rounds": r["poll_rounds"],
                "seconds": r["seconds"],
            },
        )
        poke = median_figures(
            poke_runs, lambda r: {"cpu_per_poke": r["cpu_per_poke"], "peak_rss_mib": mib(r["peak_rss_kib"])}
        )
        bench.rows.append(
            Row(
                "waiting",
                f"{n} ExecutionCompleteTriggers, one event loop",
                f"{n} waits",
                f"{fig['steady_cpu_per_round']:.3f} CPU s/poll round (first round "
                f"{fig['first_round_cpu']:.3f})",
                f"{fig['loop_peak_rss_mib']:.0f} MiB (+{fig['added_rss_mib']:.0f} MiB for the triggers)",
                f"{fig['seconds']:.1f} s",
                f"{fig['poll_rounds']:.1f} rounds; 0 worker slots held",
                fig,
                runs,
            )
        )
        bench.rows.append(
            Row(
                "waiting",
                f"{n} poke-mode sensors (one measured, x{n})",
                f"{n} waits",
                f"{poke['cpu_per_poke'] * n:.3f} CPU s/poll round",
                f"{poke['peak_rss_mib'] * n / 1024:.1f} GiB ({poke['peak_rss_mib']:.0f} MiB each)",
                "-",
                f"{n} worker slots held",
                poke,
                poke_runs,
            )
        )
        bench.checks.append(
            limit_check(
                "waiting", f"RSS the {n} triggers add to the loop process", fig["added_rss_mib"], 100, "MiB"
            )
        )
        bench.checks.append(
            Check(
                "waiting",
                "whole triggerer-like process peak RSS",
                f"{fig['loop_peak_rss_mib']:.0f} MiB",
                "(context)",
                None,
            )
        )
        for label, key in (("steady rounds", "steady_cpu_per_round"), ("all rounds", "cpu_per_round")):
            bench.checks.append(
                limit_check("waiting", f"CPU per poll round, {n} triggers, {label}", fig[key], 1.0, "s")
            )
        bench.checks.append(
            Check("waiting", "worker slots held: triggers vs poke sensors", f"0 vs {n}", "-", None)
        )


# ---------------------------------------------------------------------------------------- section 4


class StartupSection:
    """Section 4: what importing the provider and parsing the example DAGs cost, each in a fresh process."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def run(self) -> None:
        bench = self.bench
        runs = max(bench.runs, 3)
        log(f"startup: import time and DAG parse time, {runs} runs each")
        plain = [bench.run_case("import_time", {"with_dependencies": False}) for _ in range(runs)]
        split = [bench.run_case("import_time", {"with_dependencies": True}) for _ in range(runs)]
        fig_plain = median_figures(
            plain, lambda r: {"airflow": r["airflow_seconds"], "provider": r["provider_seconds"]}
        )
        fig_split = median_figures(
            split, lambda r: {"deps": r["dependencies_seconds"], "provider": r["provider_seconds"]}
        )
        bench.rows.append(
            Row(
                "startup",
                "import abm_provider (all modules) after airflow.sdk",
                "-",
                "-",
                "-",
                f"{fig_plain['provider']:.3f} s",
                f"airflow.sdk itself {fig_plain['airflow']:.2f} s",
                fig_plain,
                plain,
            )
        )
        bench.rows.append(
            Row(
                "startup",
                "... of which the provider's own code",
                "-",
                "-",
                "-",
                f"{fig_split['provider']:.3f} s",
                f"requests, aiohttp, tenacity {fig_split['deps']:.2f} s",
                fig_split,
                split,
            )
        )
        bench.checks.append(
            limit_check("startup", "abm_provider import beyond airflow.sdk", fig_plain["provider"], 0.3, "s")
        )
        for path in sorted((ROOT / "dags").glob("*.py")):
            results = [bench.run_case("dag_parse", {"path": str(path)}) for _ in range(runs)]
            fig = median_figures(results, lambda r: {"seconds": r["seconds"], "dags": float(r["dags"])})
            bench.rows.append(
                Row(
                    "startup",
                    f"parse dags/{path.name}",
                    f"{fig['dags']:.0f} DAG",
                    "-",
                    "-",
                    f"{fig['seconds']:.3f} s",
                    "DagBag, Airflow already imported",
                    fig,
                    results,
                )
            )
            bench.checks.append(limit_check("startup", f"parse dags/{path.name}", fig["seconds"], 0.5, "s"))


# ---------------------------------------------------------------------------------------- section 5

SYNC_STATE_TABLES = tuple(
    f"{bench_cases.SYNC_STATE_PREFIX}{name}" for name in ("members", "plan", "rejects", "runs")
)


def sync_rows_sql(first: int, last: int) -> str:
    """Source rows for accounts ``first`` to ``last`` (inclusive)."""
    return (
        f"SELECT {account_id_sql('i')} AS account_id, 'Account ' || CAST(i AS VARCHAR) AS account_name, "
        f"'{bench_cases.ORG_ID}' AS crm_org_id FROM generate_series({first}, {last}) AS t(i)"
    )


def sync_figures(run: dict[str, Any]) -> dict[str, float]:
    seconds = max(run["seconds"], 1e-9)
    figures = {
        "seconds": run["seconds"],
        "peak_rss_mib": mib(run["peak_rss_kib"]),
        "rows_per_s": run["source_rows"] / seconds,
        "cpu_seconds": run["cpu_seconds_total"],
        "requests": float(run["requests"]),
        "accounts_sent": float(run["accounts_sent"]),
    }
    for key in ("source_rows", "to_add", "to_remove", "added", "removed", "duplicates", "not_found"):
        figures[key] = float(run[key])
    for key in ("plan_seconds", "send_seconds"):
        if key in run:
            figures[key] = run[key]
    return figures


class SyncSection:
    """Section 5: AccountListSyncOperator over N source rows into an empty list, then after 1% changed.

    Each repetition starts from nothing: a new source table, no state tables, a new list. The first
    run sends every row. Then half of the 1% leaves the source and as many new accounts join it, and
    the second run, in a fresh process of its own, plans against the recorded state and sends only
    that change. Source and state tables share one connection: a DuckDB file, or the bench database
    on PostgreSQL. The emulator's request log gives the number of add and remove requests.
    """

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.duckdb_path = str(bench.work / "sync.duckdb")
        bench.set_conn(SYNC_DUCKDB_CONN, {"conn_type": "duckdb", "host": self.duckdb_path})
        self.count = bench.sizes.sync_rows
        # Leavers are every ``step``-th account; joiners are new accounts numbered after the last.
        self.half = max(round(self.count * SYNC_CHANGED / 2), 1)
        self.step = max(self.count // self.half, 1)

    def sql(self, warehouse: str, *statements: str) -> None:
        if warehouse == "postgres":
            psql(PG_DSN, *statements)
            return
        import duckdb

        with duckdb.connect(self.duckdb_path) as con:
            for statement in statements:
                con.execute(statement)

    def clean(self, warehouse: str) -> None:
        """No source table and no state tables: a repetition starts from nothing."""
        if warehouse == "postgres":
            psql(PG_DSN, f"DROP TABLE IF EXISTS {bench_cases.SYNC_TABLE}, {', '.join(SYNC_STATE_TABLES)}")
        else:
            Path(self.duckdb_path).unlink(missing_ok=True)
            Path(self.duckdb_path + ".wal").unlink(missing_ok=True)

    def seed(self, warehouse: str) -> None:
        self.clean(warehouse)
        self.sql(warehouse, f"CREATE TABLE {bench_cases.SYNC_TABLE} AS {sync_rows_sql(0, self.count - 1)}")

    def change(self, warehouse: str) -> None:
        """Delete ``half`` rows spread over the table and insert ``half`` accounts it never had."""
        table = bench_cases.SYNC_TABLE
        leavers = (
            f"SELECT {account_id_sql(f'i * {self.step}')} FROM generate_series(0, {self.half - 1}) AS t(i)"
        )
        self.sql(
            warehouse,
            f"DELETE FROM {table} WHERE account_id IN ({leavers})",
            f"INSERT INTO {table} {sync_rows_sql(self.count, self.count + self.half - 1)}",
        )

    def fresh_list(self, emulator: Any) -> str:
        """Forget earlier runs' members (the emulator keeps them in memory), then a new empty list."""
        from abm_provider.hooks.abm import AbmHook

        emulator.reset()
        hook = AbmHook(ABM_CONN)
        folder = hook.ensure_folder("Bench")
        listed = hook.ensure_list("Bench sync", folder["folderId"])
        hook.close()
        return str(listed["listId"])

    def sync(self, emulator: Any, warehouse: str, list_id: str, run_id: str) -> dict[str, Any]:
        """One sync run in its own process, with the add and remove requests the emulator saw."""
        emulator.admin("DELETE", "/_admin/requests")
        params = {
            "list_id": list_id,
            "run_id": run_id,
            "conn_id": SYNC_DUCKDB_CONN if warehouse == "duckdb" else POSTGRES_CONN,
            "max_in_flight": 2,
        }
        result = self.bench.run_case("account_list_sync", params)
        result |= membership_requests(emulator)
        result["accounts_sent"] = result["to_add"] + result["to_remove"]
        return result

    def bare(self, emulator: Any, warehouse: str) -> dict[str, Any]:
        """The bare request loop (the lists section's) posting the source's accounts to a new list."""
        params = {
            "list_id": self.fresh_list(emulator),
            "sql": f"SELECT account_id, account_name, crm_org_id FROM {bench_cases.SYNC_TABLE}",
            "duckdb_path": self.duckdb_path,
            "pg_dsn": PG_DSN if warehouse == "postgres" else None,
            "base_url": emulator.base_url,
            "api_key": emulator.api_key,
        }
        result = self.bench.run_case("bare_list_sync", params)
        if result["added"] != self.count:
            raise RuntimeError(f"the bare loop added {result['added']} of {self.count} accounts")
        return result

    def expect(self, run: dict[str, Any], which: str, add: int, remove: int) -> None:
        """The runs must have planned and sent exactly the change, or their figures mean nothing."""
        got = (run["to_add"], run["to_remove"], run["added"], run["removed"], run["state_count"])
        want = (add, remove, add, remove, self.count)
        if got != want:
            raise RuntimeError(
                f"sync {which} run: to_add, to_remove, added, removed, state_count = {got}, expected {want}"
            )

    def first_and_second(self, emulator: Any, warehouse: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """On the seeded source: a new list, its first sync, 1% of the source changed, its second sync."""
        list_id = self.fresh_list(emulator)
        first = self.sync(emulator, warehouse, list_id, "bench_run_1")
        self.expect(first, "first", self.count, 0)
        self.change(warehouse)
        second = self.sync(emulator, warehouse, list_id, "bench_run_2")
        self.expect(second, "second", self.half, self.half)
        return first, second

    def run(self) -> None:
        bench, repeats = self.bench, self.bench.args.sync_runs
        ensure_pg_database()
        log(
            f"sync: {self.count:,} source rows, then {SYNC_CHANGED:.0%} changed (-{self.half:,} "
            f"+{self.half:,}), {repeats} runs each"
        )
        repeat_first_and_second(bench, self, repeats)

    def report(self, label: str, runs: dict[str, list[dict[str, Any]]]) -> None:
        bench, count, half = self.bench, self.count, self.half
        first = median_figures(runs["first"], sync_figures)
        second = median_figures(runs["second"], sync_figures)
        complete = all(r["requests_complete"] for r in runs["first"] + runs["second"])
        for which, size, fig, raw in (
            ("run 1, empty list", f"{count:,} rows", first, runs["first"]),
            (
                f"run 2, {SYNC_CHANGED:.0%} changed",
                f"{count:,} rows, -{half:,} +{half:,}",
                second,
                runs["second"],
            ),
        ):
            requests = f"{fig['requests']:,.0f}" if complete else f">= {fig['requests']:,.0f}"
            notes = (
                f"to_add {fig['to_add']:,.0f}, to_remove {fig['to_remove']:,.0f}; added {fig['added']:,.0f}, "
                f"removed {fig['removed']:,.0f}; {fig['accounts_sent']:,.0f} accounts in {requests} requests"
            )
            if "plan_seconds" in fig and "send_seconds" in fig:
                notes = f"plan {fig['plan_seconds']:.1f} s + send {fig['send_seconds']:.1f} s; {notes}"
            bench.rows.append(
                Row(
                    "sync",
                    f"AccountListSyncOperator -> {label}, {which}",
                    size,
                    f"{human_count(fig['rows_per_s'])} source rows/s",
                    f"{fig['peak_rss_mib']:.0f} MiB",
                    f"{fig['seconds']:.1f} s",
                    notes,
                    fig,
                    raw,
                )
            )
        bench.checks.append(
            Check(
                "sync",
                f"{label}: run 2 / run 1 time",
                f"{second['seconds'] / first['seconds']:.3f}x ({second['seconds']:.1f} s vs "
                f"{first['seconds']:.1f} s)",
                "-",
                None,
            )
        )
        bare = median_figures(runs["bare"], lambda r: {"seconds": r["seconds"]})
        bench.checks.append(
            Check(
                "sync",
                f"{label}: run 1 / bare request loop time",
                f"{first['seconds'] / bare['seconds']:.2f}x ({first['seconds']:.1f} s vs "
                f"{bare['seconds']:.1f} s posting the same {count:,} accounts)",
                "-",
                None,
            )
        )
        bench.checks.append(
            Check(
                "sync",
                f"{label}: run 2 / run 1 peak RSS",
                f"{second['peak_rss_mib'] / first['peak_rss_mib']:.2f}x ({second['peak_rss_mib']:.0f} MiB "
                f"vs {first['peak_rss_mib']:.0f} MiB)",
                "-",
                None,
            )
        )
        bench.checks.append(
            Check(
                "sync",
                f"{label}: accounts sent by run 2",
                f"{second['accounts_sent']:,.0f} of {count:,} rows ({second['accounts_sent'] / count:.1%})",
                "-",
                None,
            )
        )


# ---------------------------------------------------------------------------------------- section 6
# Each cloud warehouse's bulk path against the generic path, on its emulator, on one export file: the
# warehouse's own dialect (Snowflake: Parquet PUT and COPY INTO; BigQuery: Parquet load jobs) and the
# generic executemany path (on BigQuery a job per batch of rows), each into an empty database or
# dataset in a fresh process. Only the ratio means anything: an emulator's absolute
# speed says nothing about the service. The emulator is started as the tests start it.


#: The paths the cloud section compares, as the load operator's ``method`` names them.
CLOUD_METHODS = ("auto", "generic")


def cloud_support() -> Any:
    """``support.cloud_warehouses`` from the tests (the one place the emulators are started)."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import support.cloud_warehouses as cloud

    return cloud


class CloudSection:
    """Section 6: each cloud warehouse's bulk path vs the generic path on its emulator, on one export file."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def export_file(self) -> Path:
        """An export of the section's size, downloaded once from the emulator."""
        size = self.bench.sizes.cloud
        target = self.bench.work / "cloud-export.csv"
        with self.bench.emulator(
            link_ttl=10**9, data_dir=str(self.bench.work / "cloud-emulator")
        ) as emulator:
            from abm_provider.hooks.abm import AbmHook

            hook = AbmHook(ABM_CONN)
            hook.create_export_job(EXPORT_TYPE, "0 5 1 1 *")
            hook.close()
            log(f"cloud: rendering a {human_bytes(size)} export")
            execution = fire_export(emulator, size)
            bench_cases.curl_to_file(execution["downloadUri"], target)
        return target

    def run(self) -> None:
        """Each warehouse in turn; one that fails is reported and the next still runs."""
        path = self.export_file()
        failures = []
        chosen = self.bench.args.cloud_warehouse or list(CLOUD_WAREHOUSES)
        measures = {"snowflake": self.snowflake, "bigquery": self.bigquery}
        for warehouse in chosen:
            measure = measures[warehouse]
            try:
                self.report(warehouse, path.stat().st_size, measure(path))
            except Exception as exc:
                print(f"\ncloud: {warehouse} FAILED:\n{exc}\n", file=sys.stderr, flush=True)
                failures.append(f"{warehouse}: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}")
        if failures:
            raise RuntimeError("; ".join(failures))

    def snowflake(self, path: Path) -> dict[str, dict[str, Any]]:
        cloud = cloud_support()
        folder = self.bench.work / "fakesnow"
        folder.mkdir(exist_ok=True)
        with cloud.running_fakesnow(folder) as server:
            return self.compare(
                "snowflake",
                path,
                server.client_env(),
                lambda: (
                    server.connection(f"ABM_BENCH_{uuid.uuid4().hex[:8].upper()}"),
                    bench_cases.PROVIDER_TABLE,
                ),
            )

    def bigquery(self, path: Path) -> dict[str, dict[str, Any]]:
        """bqemulator, each path into a new dataset of its own (the loader creates tables, not datasets)."""
        cloud = cloud_support()
        folder = self.bench.work / "bqemulator"
        folder.mkdir(exist_ok=True)
        with cloud.running_bqemulator(folder) as server:
            client = server.client()

            def new_dataset() -> tuple[dict[str, Any], str]:
                dataset = f"abm_bench_{uuid.uuid4().hex[:8]}"
                client.create_dataset(dataset)
                return server.connection(), f"{dataset}.{bench_cases.PROVIDER_TABLE}"

            try:
                return self.compare(
                    "bigquery", path, {"BIGQUERY_EMULATOR_HOST": server.rest_url}, new_dataset
                )
            finally:
                client.close()

    def compare(
        self,
        warehouse: str,
        path: Path,
        env: dict[str, str],
        target: Callable[[], tuple[dict[str, Any], str]],
    ) -> dict[str, dict[str, Any]]:
        """Each path's load of ``path``, each into a new database or dataset (``target()``: the
        connection and the table), with ``env`` set for the case processes."""
        runs: dict[str, dict[str, Any]] = {}
        saved = dict(self.bench.env)
        self.bench.env.update(env)
        try:
            for method in CLOUD_METHODS:
                connection, table = target()
                self.bench.set_conn("bench_cloud", connection)
                log(f"cloud: {warehouse}, {method} path")
                params = {"conn_id": "bench_cloud", "path": str(path), "method": method, "table": table}
                runs[method] = self.bench.run_case("cloud_load", params)
        finally:
            self.bench.env.clear()
            self.bench.env.update(saved)
        return runs

    def report(self, warehouse: str, size: int, runs: dict[str, dict[str, Any]]) -> None:
        for run in runs.values():
            seconds = float(run["seconds"])
            self.bench.rows.append(
                Row(
                    section="cloud",
                    case=f"{warehouse} {run['method']}",
                    size=human_bytes(size),
                    throughput=f"{size / 2**20 / seconds:.1f} MiB/s",
                    peak_rss=f"{mib(run['peak_rss_kib']):.0f} MiB",
                    seconds=f"{seconds:.1f}",
                    notes=f"{run['rows_loaded']:,} rows",
                    figures={"seconds": seconds, "rows": float(run["rows_loaded"])},
                    runs=[run],
                )
            )
        if {"auto", "generic"} <= runs.keys():
            ratio = float(runs["generic"]["seconds"]) / float(runs["auto"]["seconds"])
            shown = f"{ratio:.1f}x"
            self.bench.checks.append(
                Check("cloud", f"{warehouse}: bulk path vs generic path", shown, ">= 10x", ratio >= 10)
            )


# ---------------------------------------------------------------------------------------- section 7


# ---------------------------------------------------------------------------------------- main


def run_section(bench: Bench, name: str, make: Callable[[Bench], Section]) -> bool:
    """Run one section; a failure is printed and recorded, and the other sections still run.

    A full run takes the better part of an hour, so one failing case (say DuckDB running out of its
    memory limit on the largest file) must not throw away every other figure.
    """
    try:
        make(bench).run()
    except Exception as exc:  # reported in the table and in the exit status
        print(f"\nsection {name} FAILED:\n{exc}\n", file=sys.stderr, flush=True)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        bench.checks.append(Check(name, "section completed", f"failed: {first}", "completes", False))
        return False
    return True


def write_results(bench: Bench, machine: dict[str, str], settings: dict[str, Any], command: str) -> Path:
    out = bench.args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    stem = "latest-quick" if bench.args.quick else "latest"
    document = {
        "command": command,
        "machine": machine,
        "settings": settings,
        "rows": [asdict(r) for r in bench.rows],
        "checks": [asdict(c) for c in bench.checks],
    }
    (out / f"{stem}.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / f"{stem}.md").write_text(render_markdown(machine, settings, bench.rows, bench.checks, command))
    return out / f"{stem}.md"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for tool in ("curl", "psql"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed; the ceiling needs it", file=sys.stderr)
            return 2
    sections = args.only or list(SECTIONS)
    work = Path(tempfile.mkdtemp(prefix="abm-bench-", dir=args.workdir))
    started = time.monotonic()
    bench = Bench(args, work)
    try:
        classes: dict[str, Callable[[Bench], Section]] = {
            "export": ExportSection,
            "lists": ListSection,
            "waiting": WaitingSection,
            "startup": StartupSection,
            "sync": SyncSection,
            "cloud": CloudSection,
            "audiences": AudienceSection,
        }
        failed = [
            name for name in SECTIONS if name in sections and not run_section(bench, name, classes[name])
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    machine = machine_info(PG_ADMIN_DSN)
    sizes = bench.sizes
    settings = {
        "runs": bench.runs,
        "big_runs": args.big_runs,
        "sections": ",".join(sections),
        "export": human_bytes(sizes.export),
        "export_big": human_bytes(sizes.export_big),
        "baseline": human_bytes(sizes.baseline),
        "accounts": ",".join(str(a) for a in sizes.accounts),
        "triggers": sizes.triggers,
        "poll_interval_s": sizes.poll_interval,
        "sync_rows": sizes.sync_rows,
        "sync_runs": args.sync_runs,
        "sync_changed": f"{SYNC_CHANGED:.0%}",
        "cloud": human_bytes(sizes.cloud),
        "audience_rows": sizes.audience_rows,
        "audience_exclusions": sizes.audience_exclusions,
        "audience_runs": args.audience_runs,
        "sync_warehouses": ",".join(args.sync_warehouse or SYNC_WAREHOUSE_NAMES),
        "duckdb_memory_limit": args.duckdb_memory_limit,
        "duckdb_threads": args.duckdb_threads or "default",
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    command = "make bench" + (
        f" BENCH_ARGS='{shlex.join(argv or sys.argv[1:])}'" if (argv or sys.argv[1:]) else ""
    )
    print()
    print(render_text(machine, settings, bench.rows, bench.checks))
    path = write_results(bench, machine, settings, command)
    print(f"\nwritten: {path} and {path.with_suffix('.json')}")
    if failed:
        print(f"failed sections: {', '.join(failed)} (see the errors above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
