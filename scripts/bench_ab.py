"""One export load, two checkouts, interleaved run by run: does a change make a figure worse?

`make bench` measures one checkout at a time, so a drift of the machine (another job, a slow hour)
lands on whichever checkout ran then, and two runs an hour apart can differ by more than a change
does. Here both checkouts load the same emulator export into the same warehouse, in pairs, the
order alternating from pair to pair, each run a fresh process of its own tree's
``scripts/bench_cases.py`` (case ``provider_export``: the example DAG's load while it downloads) on
an empty table. It prints every run, then each side's median and the ratio of the medians.

``--case sync`` compares `make bench`'s sync section the same way: per run, a new source table of
``--sync-rows`` rows and a new list, the first sync (every row sent), 1% of the rows changed, then
the second sync (only the change sent), each a fresh process of its side's ``account_list_sync``
case, the source and the state tables on ``--warehouse``. The figures are each sync's seconds.

    git worktree add /tmp/old <revision>
    .venv/bin/python scripts/bench_ab.py --old /tmp/old --size 256MiB --pairs 6 --warehouse postgres
    .venv/bin/python scripts/bench_ab.py --old /tmp/old --case sync --sync-rows 200000 --pairs 4

Needs what `make bench` needs (a PostgreSQL server: ``ABM_BENCH_PG_URL``); it uses the bench's
database and drops only the bench's own tables in it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bench_cases
import requests
from bench import (
    DUCKDB_CONN,
    DUCKDB_MEMORY_LIMIT,
    EXPORT_TYPE,
    POSTGRES_CONN,
    SyncSection,
    case_env,
    dialect_options,
    drop_pg_tables,
    ensure_pg_database,
    export_figures,
    fire_export,
    human_bytes,
)
from bench_report import ROOT
from measure_storage import parse_size

SIDES = ("old", "new")


def pair_order(pairs: int) -> Iterator[tuple[int, str]]:
    """Each pair's number and its sides in the order they run: the order alternates from pair to pair."""
    for pair in range(pairs):
        for side in SIDES if pair % 2 == 0 else tuple(reversed(SIDES)):
            yield pair, side


def child_env(work: Path, emulator: Any, duckdb_path: Path) -> dict[str, str]:
    """What `make bench` gives its cases, with the emulator and the DuckDB file as connections."""
    return {
        **case_env(work),
        "AIRFLOW_CONN_ABM_DEFAULT": emulator.airflow_connection(),
        f"AIRFLOW_CONN_{DUCKDB_CONN.upper()}": json.dumps({"conn_type": "duckdb", "host": str(duckdb_path)}),
    }


def tree_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    """The environment that makes a child import the provider of ``tree``, checked once per tree."""
    wanted = {**env, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree / 'scripts'}"}
    found = subprocess.run(
        [sys.executable, "-c", "import abm_provider; print(abm_provider.__file__)"],
        env=wanted,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"a child given {tree} imports the provider from {found}")
    return wanted


def run_once(
    tree: Path, env: dict[str, str], params: dict[str, Any], case: str = "provider_export"
) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(tree / "scripts" / "bench_cases.py"), case, json.dumps(params)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(bench_cases.RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the case failed in {tree} ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len(bench_cases.RESULT_PREFIX) :])
    return result


def fire(emulator: Any, size: int) -> dict[str, Any]:
    """The export job, then a COMPLETE execution of ``size`` bytes."""
    requests.post(
        f"{emulator.base_url}/exports/v1/exportJobs",
        json={"type": EXPORT_TYPE, "schedule": "0 5 * * *"},
        headers={"Authorization": f"Bearer {emulator.api_key}"},
        timeout=60,
    ).raise_for_status()
    return fire_export(emulator, size)


class SyncSizes:
    """The one size ``bench.SyncSection`` reads."""

    def __init__(self, sync_rows: int) -> None:
        self.sync_rows = sync_rows


class SideRunner:
    """What ``bench.SyncSection`` asks of a bench, for one side: its cases run in that side's tree.

    The connections it registers go to both sides' children and to this process, which makes the
    lists (with this checkout's hook).
    """

    def __init__(self, work: Path, sync_rows: int, envs: dict[str, dict[str, str]], tree: Path, side: str):
        self.work, self.sizes, self.envs, self.tree, self.side = work, SyncSizes(sync_rows), envs, tree, side

    def set_conn(self, name: str, conn: dict[str, Any]) -> None:
        value = json.dumps(conn)
        os.environ[f"AIRFLOW_CONN_{name.upper()}"] = value
        for env in self.envs.values():
            env[f"AIRFLOW_CONN_{name.upper()}"] = value

    def run_case(self, case: str, params: dict[str, Any]) -> dict[str, Any]:
        return run_once(self.tree, self.envs[self.side], params, case)


def sync_pair_run(section: SyncSection, emulator: Any, warehouse: str) -> dict[str, float]:
    """One side's first sync into a new list, 1% of the source changed, then its second sync."""
    section.seed(warehouse)
    try:
        first, second = section.first_and_second(emulator, warehouse)
    finally:
        section.clean(warehouse)
    return {
        "first_seconds": first["seconds"],
        "second_seconds": second["seconds"],
        "peak_rss_mib": max(first["peak_rss_kib"], second["peak_rss_kib"]) / 1024,
    }


def compare_sync(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    """Both sides' first and second list sync, in alternating pairs, on one emulator and warehouse."""
    from abm_emulator.testing import start_emulator

    trees = {"old": args.old, "new": args.new}
    work = Path(tempfile.mkdtemp(prefix="abm-bench-ab-sync-"))
    ensure_pg_database()
    figures: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    with start_emulator() as emulator:
        env = child_env(work, emulator, work / "unused.duckdb")
        os.environ["AIRFLOW_CONN_ABM_DEFAULT"] = env["AIRFLOW_CONN_ABM_DEFAULT"]
        envs = {side: tree_env(env, tree) for side, tree in trees.items()}
        sections = {
            side: SyncSection(SideRunner(work, args.sync_rows, envs, trees[side], side))  # type: ignore[arg-type]
            for side in SIDES
        }
        print(
            f"list sync of {args.sync_rows:,} rows on {args.warehouse}, then 1% changed: "
            f"{args.old} (old) against {args.new} (new)"
        )
        for pair, side in pair_order(args.pairs):
            run = sync_pair_run(sections[side], emulator, args.warehouse)
            figures[side].append(run)
            print(
                f"pair {pair + 1} {side}: first {run['first_seconds']:.2f} s, second "
                f"{run['second_seconds']:.2f} s, peak RSS {run['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    return figures


def report_sync(figures: dict[str, list[dict[str, float]]]) -> None:
    for key in ("first_seconds", "second_seconds"):
        medians = {side: statistics.median(r[key] for r in figures[side]) for side in SIDES}
        slower = sum(n[key] > o[key] for o, n in zip(figures["old"], figures["new"], strict=True))
        print(
            f"{key}: old median {medians['old']:.2f} s, new median {medians['new']:.2f} s; new/old "
            f"{medians['new'] / medians['old']:.3f}; new slower in {slower} of {len(figures['new'])} pairs"
        )


def compare(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    from abm_emulator.testing import start_emulator

    trees = {"old": args.old, "new": args.new}
    work = Path(tempfile.mkdtemp(prefix="abm-bench-ab-"))
    duckdb_path = work / "ab.duckdb"
    ensure_pg_database()
    figures: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    with start_emulator(link_ttl=30 * 86_400) as emulator:
        env = child_env(work, emulator, duckdb_path)
        envs = {side: tree_env(env, tree) for side, tree in trees.items()}
        params = {
            "execution": fire(emulator, args.size),
            "base": str(work),
            "export_type": EXPORT_TYPE,
            "conn_id": POSTGRES_CONN if args.warehouse == "postgres" else DUCKDB_CONN,
            "duckdb_path": str(duckdb_path) if args.warehouse == "duckdb" else None,
            "dialect_options": dialect_options(args.warehouse, DUCKDB_MEMORY_LIMIT, None),
            # What a checkout from before the dialects owned their options reads instead.
            "duckdb_memory_limit": DUCKDB_MEMORY_LIMIT,
        }
        print(f"{human_bytes(args.size)} into {args.warehouse}: {args.old} (old) against {args.new} (new)")
        for pair, side in pair_order(args.pairs):
            drop_pg_tables()
            run = export_figures(run_once(trees[side], envs[side], params))
            figures[side].append(run)
            print(
                f"pair {pair + 1} {side}: {run['seconds']:.2f} s, {run['mb_per_s']:.1f} MB/s, "
                f"peak RSS {run['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    return figures


def report(figures: dict[str, list[dict[str, float]]]) -> None:
    medians = {side: statistics.median(r["mb_per_s"] for r in figures[side]) for side in SIDES}
    for side in SIDES:
        rates = [r["mb_per_s"] for r in figures[side]]
        rss = statistics.median(r["peak_rss_mib"] for r in figures[side])
        print(
            f"{side}: median {medians[side]:.1f} MB/s (runs {min(rates):.1f}-{max(rates):.1f}), "
            f"peak RSS median {rss:.0f} MiB"
        )
    wins = sum(n["mb_per_s"] > o["mb_per_s"] for o, n in zip(figures["old"], figures["new"], strict=True))
    print(
        f"new/old median throughput {medians['new'] / medians['old']:.3f}; new faster in {wins} of "
        f"{len(figures['new'])} pairs"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="checkout of the revision to compare with")
    parser.add_argument("--new", type=Path, default=ROOT, help="checkout of the change (default: this one)")
    parser.add_argument("--size", type=parse_size, default=parse_size("256MiB"), help="export size")
    parser.add_argument("--pairs", type=int, default=6, help="runs of each side")
    parser.add_argument("--warehouse", choices=("postgres", "duckdb"), default="postgres")
    parser.add_argument("--case", choices=("export", "sync"), default="export", help="what to compare")
    parser.add_argument("--sync-rows", type=int, default=200_000, help="source rows of --case sync")
    args = parser.parse_args(argv)
    if args.case == "sync":
        report_sync(compare_sync(args))
    else:
        report(compare(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
