"""What one sync run does: its list, its run id, its mode and its limits.

A module of its own because the plan, the sending and the summary all read the options, and the
engine that calls them must not be imported by them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["mirror", "add_only"]
#: ``mirror`` adds what joined the source and removes what left it; ``add_only`` never removes.
MODES: tuple[str, ...] = ("mirror", "add_only")


@dataclass(frozen=True)
class SyncOptions:
    """What one sync run does; checked by the operator before anything runs."""

    list_id: str
    run_id: str
    mode: Mode = "mirror"
    dry_run: bool = False
    max_rejected: int | float | None = 0
    batch_size: int = 1000
    max_in_flight: int = 2
    progress_interval: float = 30.0
    stage_rows: int = 50_000
    lock_timeout: float = 0.0
