"""Start bqemulator (a BigQuery emulator) with no network, and say where it listens.

    python bqemulator_offline.py --project PROJECT [--ready-fd FD]

bqemulator runs DuckDB's ``INSTALL spatial`` as it starts, which downloads the extension, and no
spatial build for the DuckDB in use is on PyPI: this launcher skips that step (GEOGRAPHY is then
unsupported) and the best-effort ``INSTALL avro`` too, then serves REST and gRPC on free loopback
ports until SIGTERM or SIGINT. DuckDB keeps its extensions under ``$HOME``, so give the process a
``HOME`` of its own. Once both servers accept connections it writes
``{"rest_url": ..., "grpc_endpoint": ...}`` to ``--ready-fd`` (then closes it), or to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal

from bqemulator.config import LogLevel, PersistenceMode, Settings
from bqemulator.server import EmulatorServer
from bqemulator.storage.engine import DuckDBEngine


def _no_spatial(self: DuckDBEngine) -> None:
    """Replaces ``DuckDBEngine._load_spatial``: its ``INSTALL spatial`` needs the internet."""


async def serve(project: str, ready_fd: int | None) -> None:
    DuckDBEngine._load_spatial = _no_spatial  # type: ignore[method-assign]
    settings = Settings(
        persistence_mode=PersistenceMode.EPHEMERAL,
        rest_host="127.0.0.1",
        rest_port=0,
        grpc_host="127.0.0.1",
        grpc_port=0,
        default_project_id=project,
        enable_format_extensions=False,  # INSTALL avro: the internet again
        log_level=LogLevel.WARNING,
    )
    server = EmulatorServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        ready = json.dumps({"rest_url": server.rest_url, "grpc_endpoint": server.grpc_endpoint})
        if ready_fd is None:
            print(ready, flush=True)
        else:
            with os.fdopen(ready_fd, "w") as out:
                out.write(ready)
        await stop.wait()
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--project", required=True, help="the project a request without one is in")
    parser.add_argument("--ready-fd", type=int, help="an inherited pipe to write the ready line to")
    args = parser.parse_args()
    asyncio.run(serve(args.project, args.ready_fd))


if __name__ == "__main__":
    main()
