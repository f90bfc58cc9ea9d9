"""Compare DownloadExecutionCsvOperator's download throughput with curl on the same link.

Starts the emulator on free loopback ports, creates an export job, fires one COMPLETE execution of
``--size-mib`` (default 1024) and downloads its ``downloadUri`` alternately with ``curl -o`` and with
the operator (hashing, integrity checks, atomic placement included), ``--repeat`` times each, in the
same run. Prints each timing, the median throughput of both and the ratio operator/curl. A benchmark,
not a test: nothing is asserted.

    .venv/bin/python scripts/measure_download.py [--size-mib 1024] [--repeat 3] [--chunk-mib 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

MiB = 1 << 20


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="export size in MiB (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="downloads per tool (default 3)")
    parser.add_argument("--chunk-mib", type=int, default=8, help="operator chunk size in MiB (default 8)")
    parser.add_argument("--parquet", action="store_true", help="also time to_parquet=True")
    parser.add_argument("--workdir", default=None, help="where files go (default: a temp dir, removed)")
    return parser.parse_args()


def _curl(uri: str, target: Path) -> tuple[float, int]:
    started = time.perf_counter()
    subprocess.run(["curl", "--silent", "--show-error", "--fail", "-o", str(target), uri], check=True)
    elapsed = time.perf_counter() - started
    size = target.stat().st_size
    target.unlink()
    return elapsed, size


def _operator(
    execution: dict[str, Any], base: Path, chunk: int, to_parquet: bool = False
) -> tuple[float, int]:
    from abm_provider.operators.exports import DownloadExecutionCsvOperator

    ti = SimpleNamespace(dag_id="measure", task_id="download", run_id="bench", try_number=1, map_index=-1)
    context: Any = {"ti": ti, "task_instance": ti, "run_id": "bench"}
    op = DownloadExecutionCsvOperator(
        task_id="download",
        execution=execution,
        base=str(base),
        if_exists="overwrite",
        chunk_size=chunk,
        to_parquet=to_parquet,
    )
    started = time.perf_counter()
    result = op.execute(context)
    elapsed = time.perf_counter() - started
    Path(result["path"]).unlink()
    return elapsed, int(result["bytes"])


def main() -> int:
    args = _parse()
    if shutil.which("curl") is None:
        print("curl is not installed", file=sys.stderr)
        return 2
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="abm-measure-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AIRFLOW_HOME", str(workdir / "airflow"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

    from abm_emulator.testing import start_emulator

    try:
        with start_emulator() as emulator:
            conn = {"conn_type": "abm", "host": emulator.base_url, "password": emulator.api_key}
            os.environ["AIRFLOW_CONN_ABM_DEFAULT"] = json.dumps(conn)
            from abm_provider.hooks.abm import AbmHook

            hook = AbmHook("abm_default")
            hook.create_export_job("TACTIC_PERFORMANCE", "0 5 1 1 *")
            fired = emulator.fire("TACTIC_PERFORMANCE", outcome="COMPLETE", sizeBytes=args.size_mib * MiB)
            execution = next(e for e in hook.iter_executions("TACTIC_PERFORMANCE") if e["id"] == fired["id"])
            uri = execution["downloadUri"]
            print(
                f"emulator {emulator.base_url}, storage {emulator.storage_url}; file of ~{args.size_mib} MiB"
            )
            # Warm-up: the emulator renders the file on first request; neither tool should pay for that.
            _curl(uri, workdir / "warmup.csv")

            rates: dict[str, list[float]] = {"curl": [], "operator": [], "parquet": []}

            def record(round_number: int, tool: str, seconds: float, size: int) -> None:
                rates[tool].append(size / seconds / MiB)
                print(
                    f"round {round_number}: {tool:<8} {size / MiB:8.1f} MiB in {seconds:6.2f}s "
                    f"= {rates[tool][-1]:7.1f} MiB/s"
                )

            chunk = args.chunk_mib * MiB
            for round_number in range(1, args.repeat + 1):
                record(round_number, "curl", *_curl(uri, workdir / "curl.csv"))
                record(round_number, "operator", *_operator(execution, workdir / "op", chunk))
                if args.parquet:
                    record(
                        round_number, "parquet", *_operator(execution, workdir / "pq", chunk, to_parquet=True)
                    )
            curl_median = statistics.median(rates["curl"])
            for tool in ("operator", "parquet"):
                if rates[tool]:
                    median = statistics.median(rates[tool])
                    print(
                        f"median: curl {curl_median:.1f} MiB/s, {tool} {median:.1f} MiB/s, "
                        f"ratio {tool}/curl = {median / curl_median:.2f}"
                    )
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
