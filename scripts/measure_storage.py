"""Measure the emulator's export rendering and object-storage download speed and memory.

Renders one export CSV with ``abm_emulator.csvgen`` (timed, with the renderer's peak RSS), serves it with
``abm_emulator.storage`` under uvicorn in a subprocess on a free 127.0.0.1 port, downloads it with
``curl -o /dev/null`` (and once more with a ``Range`` resume) and samples the server's RSS with psutil
while it streams.  Prints a human summary and one ``MEASURE_STORAGE {json}`` line.

    .venv/bin/python scripts/measure_storage.py                     # 1 GiB TACTIC_PERFORMANCE
    .venv/bin/python scripts/measure_storage.py --size 200MB --http h11 --loop asyncio

Exit status 1 when a target is missed (download < --min-mbps MB/s or server peak RSS > --max-rss-mib MiB),
so it can run as a check.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psutil

from abm_emulator.csvgen import EXPORT_COLUMNS, TACTIC_PERFORMANCE, write_export
from abm_emulator.storage import LinkSigner

SECRET = b"measure-storage-secret"
OBJECT_KEY = "acct-measure/00000000-0000-4000-8000-000000000001.csv"

# Runs in the server subprocess: the storage app on the real clock, then its own peak RSS on exit.
SERVER_CODE = textwrap.dedent(
    """
    import sys, threading
    from datetime import datetime, timezone
    from pathlib import Path
    import uvicorn
    from abm_emulator.storage import LinkSigner, create_storage_app

    root, port, http, loop, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    signer = LinkSigner(secret.encode(), 3600)
    app = create_storage_app(Path(root), signer, lambda: datetime.now(timezone.utc))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=http, loop=loop, log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)

    def stop_on_stdin_eof():
        sys.stdin.read()
        server.should_exit = True

    threading.Thread(target=stop_on_stdin_eof, daemon=True).start()
    server.run()
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork + exec.
    status = Path("/proc/self/status").read_text()
    print("SERVER_MAXRSS_KIB", status.split("VmHWM:")[1].split()[0], flush=True)
    """
)


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(|B|KB|MB|GB|KIB|MIB|GIB)", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"--size {text!r}: expected e.g. 1GiB, 200MB or 1048576")
    factor = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
    return int(float(match.group(1)) * factor[match.group(2)])


def peak_rss_kib() -> int:
    """This process's peak RSS (VmHWM): unlike ru_maxrss it does not include the parent's before exec."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, server: subprocess.Popen[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"storage server exited early with status {server.returncode}")
        try:
            request = urllib.request.Request(url, method="HEAD")  # noqa: S310 - our own loopback http URL
            with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise RuntimeError(f"storage server did not answer {url} within {timeout} s")


class RssSampler(threading.Thread):
    """Peak resident set size of one process, sampled every few milliseconds."""

    def __init__(self, pid: int, interval: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            time.sleep(self.interval)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak


def curl(url: str, extra: list[str]) -> dict[str, float]:
    """One ``curl -o /dev/null`` run; curl's own timing and byte count, no Python in the data path."""
    fmt = "%{http_code} %{size_download} %{time_total} %{speed_download}"
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", fmt, *extra, url], check=True, capture_output=True, text=True
    ).stdout.split()
    return {
        "status": int(out[0]),
        "bytes": int(out[1]),
        "seconds": float(out[2]),
        "bytes_per_s": float(out[3]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=parse_size, default=2**30, help="target file size (default 1GiB)")
    parser.add_argument("--type", default=TACTIC_PERFORMANCE, choices=sorted(EXPORT_COLUMNS))
    parser.add_argument("--http", default="auto", choices=["auto", "httptools", "h11"])
    parser.add_argument("--loop", default="auto", choices=["auto", "uvloop", "asyncio"])
    parser.add_argument("--runs", type=int, default=3, help="full downloads to time (best and all reported)")
    parser.add_argument("--min-mbps", type=float, default=300.0, help="required download MB/s (10**6 bytes)")
    parser.add_argument("--max-rss-mib", type=float, default=200.0, help="allowed server peak RSS in MiB")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    if shutil.which("curl") is None:
        print("curl is not installed", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="measure-storage-", dir=args.dir))
    server: subprocess.Popen[str] | None = None
    try:
        path = work / OBJECT_KEY
        started = time.perf_counter()
        info = write_export(
            path,
            args.type,
            seed=1,
            account="acct-measure",
            generated_at=datetime.now(UTC),
            size_bytes=args.size,
        )
        render_s = time.perf_counter() - started
        render_rss_mib = peak_rss_kib() / 1024

        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER_CODE, str(work), str(port), args.http, args.loop, SECRET.decode()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        signer = LinkSigner(SECRET, 3600)
        url = signer.presigned_url(f"http://127.0.0.1:{port}", OBJECT_KEY, datetime.now(UTC))
        wait_ready(url, server)
        idle_rss_mib = psutil.Process(server.pid).memory_info().rss / 2**20

        sampler = RssSampler(server.pid)
        sampler.start()
        runs = [curl(url, []) for _ in range(args.runs)]
        half = info.bytes // 2
        resumed = curl(url, ["-r", f"{half}-"])
        peak_rss_mib = sampler.stop() / 2**20
        # Closing stdin asks the server to shut down cleanly and report its own peak RSS.
        server_out, _ = server.communicate(timeout=30)
        vmhwm_match = re.search(r"SERVER_MAXRSS_KIB (\d+)", server_out or "")
        server_vmhwm_mib = int(vmhwm_match.group(1)) / 1024 if vmhwm_match else None
        server = None
    finally:
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)

    for run in runs:
        if run["status"] != 200 or run["bytes"] != info.bytes:
            raise RuntimeError(f"bad download: {run} for a file of {info.bytes} bytes")
    if resumed["status"] != 206 or resumed["bytes"] != info.bytes - half:
        raise RuntimeError(f"bad ranged download: {resumed}")
    best = max(r["bytes_per_s"] for r in runs)
    result = {
        "export_type": args.type,
        "target_bytes": args.size,
        "file_bytes": info.bytes,
        "rows": info.rows,
        "render_seconds": round(render_s, 2),
        "render_mb_per_s": round(info.bytes / render_s / 1e6, 1),
        "render_peak_rss_mib": round(render_rss_mib, 1),
        "uvicorn_http": args.http,
        "uvicorn_loop": args.loop,
        "httptools_installed": importlib.util.find_spec("httptools") is not None,
        "uvloop_installed": importlib.util.find_spec("uvloop") is not None,
        "download_mb_per_s": [round(r["bytes_per_s"] / 1e6, 1) for r in runs],
        "download_seconds": [round(r["seconds"], 3) for r in runs],
        "ranged_download_mb_per_s": round(resumed["bytes_per_s"] / 1e6, 1),
        "server_idle_rss_mib": round(idle_rss_mib, 1),
        "server_peak_rss_mib_sampled": round(peak_rss_mib, 1),
        "server_vmhwm_mib": None if server_vmhwm_mib is None else round(server_vmhwm_mib, 1),
        "cpu_count": os.cpu_count(),
    }
    print(
        f"rendered {info.bytes:,} bytes ({info.rows:,} rows of {args.type}) in {render_s:.2f} s "
        f"= {result['render_mb_per_s']} MB/s, renderer peak RSS {render_rss_mib:.0f} MiB"
    )
    print(
        f"uvicorn http={args.http} loop={args.loop} (httptools installed: {result['httptools_installed']}, "
        f"uvloop installed: {result['uvloop_installed']})"
    )
    print(
        f"curl -o /dev/null: {', '.join(f'{m} MB/s' for m in result['download_mb_per_s'])}; "
        f"Range resume of the second half: {result['ranged_download_mb_per_s']} MB/s"
    )
    print(
        f"server RSS: idle {idle_rss_mib:.0f} MiB, peak while streaming {peak_rss_mib:.0f} MiB (sampled), "
        f"VmHWM {result['server_vmhwm_mib']} MiB"
    )
    print("MEASURE_STORAGE " + json.dumps(result))
    peak = max(peak_rss_mib, server_vmhwm_mib or 0.0)
    ok = best / 1e6 >= args.min_mbps and peak <= args.max_rss_mib
    print("PASS" if ok else f"FAIL: needs >= {args.min_mbps} MB/s and <= {args.max_rss_mib} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
