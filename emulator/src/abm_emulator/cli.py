"""``abm-emulator``: run the API and storage origins, print a READY line, stop cleanly on a signal.

The READY line is the machine interface for whoever started the process (`testing.start_emulator`,
scripts, compose health checks): exactly one line, ``ABM_EMULATOR_READY {json}``, printed and flushed
only once both origins accept connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from abm_emulator.clock import EmulatedClock, parse_instant
from abm_emulator.server import bind, build_origins, serve_both
from abm_emulator.service import Emulator, Settings, parse_api_keys

DEFAULT_API_KEY = "abm-demo-key"
READY_PREFIX = "ABM_EMULATOR_READY"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="abm-emulator",
        description="Local emulator of the Account Lists v2 and Export Jobs v1 API, with its storage origin.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--public-host",
        default=None,
        help="host name put in base_url and downloadUri (default: --host, or 127.0.0.1 "
        "when listening on all interfaces)",
    )
    parser.add_argument("--port", type=int, default=8080, help="API origin port; 0 picks a free one")
    parser.add_argument(
        "--storage-port", type=int, default=8081, help="storage origin port; 0 picks a free one"
    )
    parser.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY[:ACCOUNT]",
        help=f"an accepted API key, repeatable (default {DEFAULT_API_KEY}); keys share an "
        "account only when they name the same ACCOUNT",
    )
    parser.add_argument(
        "--clock-speed",
        type=float,
        default=1.0,
        help="emulated seconds per real second (2880: one day in 30 s)",
    )
    parser.add_argument("--clock-start", default=None, help="ISO 8601 start of the emulated clock (UTC)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the generated export data")
    parser.add_argument(
        "--export-size-bytes", type=int, default=200_000, help="approximate size of every rendered CSV"
    )
    parser.add_argument("--link-ttl", type=int, default=900, help="downloadUri lifetime in emulated seconds")
    parser.add_argument(
        "--pending-seconds",
        type=float,
        default=60.0,
        help="emulated seconds a scheduled execution stays PENDING",
    )
    parser.add_argument(
        "--running-seconds",
        type=float,
        default=240.0,
        help="emulated seconds a scheduled execution stays RUNNING",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where CSV files are rendered (default: a temporary directory removed on exit)",
    )
    parser.add_argument(
        "--state-file",
        type=Path,
        default=None,
        help="JSON file the state is saved to on every change and reloaded from on start",
    )
    parser.add_argument("--rate-limit", type=float, default=None, help="requests per second per API key")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    return parser


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("port", "storage_port"):
        if not 0 <= getattr(args, name) <= 65535:
            parser.error(f"--{name.replace('_', '-')} must be 0-65535")
    for name in ("export_size_bytes", "link_ttl"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    if args.clock_speed <= 0:
        parser.error("--clock-speed must be > 0")
    if args.pending_seconds < 0 or args.running_seconds < 0:
        parser.error("--pending-seconds and --running-seconds must be >= 0")
    if args.rate_limit is not None and args.rate_limit <= 0:
        parser.error("--rate-limit must be > 0")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    logging.basicConfig(
        level=logging.INFO, format="abm-emulator %(levelname)s %(message)s", stream=sys.stderr
    )
    try:
        api_keys = parse_api_keys(args.api_key or [DEFAULT_API_KEY])
        start = parse_instant(args.clock_start) if args.clock_start else None
    except ValueError as exc:
        parser.error(str(exc))

    temp_dir = None
    if args.data_dir is None:
        temp_dir = tempfile.mkdtemp(prefix="abm-emulator-data-")
        data_dir = Path(temp_dir)
    else:
        data_dir = args.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
    try:
        settings = Settings(
            api_keys=api_keys,
            seed=args.seed,
            export_size_bytes=args.export_size_bytes,
            link_ttl=args.link_ttl,
            pending_seconds=args.pending_seconds,
            running_seconds=args.running_seconds,
            data_dir=data_dir.resolve(),
            state_file=args.state_file,
        )
        emulator = Emulator(settings, EmulatedClock(start, args.clock_speed))
        if args.state_file is not None and args.state_file.exists():
            emulator.load(json.loads(args.state_file.read_text()), restore_clock=args.clock_start is None)
            print(f"abm-emulator: state restored from {args.state_file}", flush=True)
        api_sock = bind(args.host, args.port)
        storage_sock = bind(args.host, args.storage_port)
        public = args.public_host or ("127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host)  # noqa: S104
        shown = f"[{public}]" if ":" in public else public
        base_url = f"http://{shown}:{api_sock.getsockname()[1]}"
        settings.storage_url = f"http://{shown}:{storage_sock.getsockname()[1]}"
        origins = build_origins(emulator, args.rate_limit)

        def announce() -> None:
            print(f"abm-emulator: API origin at {base_url} (admin API under {base_url}/_admin)", flush=True)
            print(f"abm-emulator: storage origin at {settings.storage_url}, files in {data_dir}", flush=True)
            print(f"abm-emulator: emulated clock {emulator.clock.describe()}", flush=True)
            ready = {
                "base_url": base_url,
                "storage_url": settings.storage_url,
                "api_keys": list(api_keys),
                "pid": os.getpid(),
            }
            print(f"{READY_PREFIX} {json.dumps(ready)}", flush=True)

        asyncio.run(serve_both(emulator, origins, api_sock, storage_sock, announce, args.log_level))
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
