"""One export load, two checkouts, interleaved run by run: does a change make a figure worse?

`make bench` measures one checkout at a time, so a drift of the machine (another job, a slow hour)
lands on whichever checkout ran then, and two runs an hour apart can differ by more than a change
does. Here both checkouts load the same emulator export into the same warehouse, in pairs, the
order alternating from pair to pair, each run a fresh process of its own tree's
``scripts/bench_cases.py`` (case ``provider_export``: the example DAG's load while it downloads) on
an empty table. It prints every run, then each side's median and the ratio of the medians.

    git worktree add /tmp/old <revision>
    .venv/bin/python scripts/bench_ab.py --old /tmp/old --size 256MiB --pairs 6 --warehouse postgres

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
from pathlib import Path
from typing import Any

import bench_cases
import requests
from bench import (
    DUCKDB_CONN,
    DUCKDB_MEMORY_LIMIT,
    EXPORT_TYPE,
    POSTGRES_CONN,
    case_env,
    drop_pg_tables,
    ensure_pg_database,
    export_figures,
    fire_export,
    human_bytes,
)
from bench_report import ROOT
from measure_storage import parse_size

SIDES = ("old", "new")


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


def run_once(tree: Path, env: dict[str, str], params: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(tree / "scripts" / "bench_cases.py"), "provider_export", json.dumps(params)],
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
            "duckdb_memory_limit": DUCKDB_MEMORY_LIMIT,
        }
        print(f"{human_bytes(args.size)} into {args.warehouse}: {args.old} (old) against {args.new} (new)")
        for pair in range(args.pairs):
            for side in SIDES if pair % 2 == 0 else tuple(reversed(SIDES)):
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
    args = parser.parse_args(argv)
    report(compare(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
