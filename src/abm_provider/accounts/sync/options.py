"""What one sync run does: its list, its run id, its mode, its guards and its limits.

A module of its own because the plan, the sending and the summary all read the options, and the
engine that calls them must not be imported by them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from abm_provider.common.arguments import check_number
from abm_provider.common.rejects import check_limit

Mode = Literal["mirror", "add_only", "remove_only"]
#: ``mirror`` adds what joined the source and removes what left it; ``add_only`` never removes;
#: ``remove_only`` never adds (an exclusion list that only shrinks as its source does).
MODES: tuple[str, ...] = ("mirror", "add_only", "remove_only")
#: The modes that remove members whose key left the source, and so are guarded by ``max_removals``.
REMOVING_MODES: tuple[str, ...] = ("mirror", "remove_only")
#: Why a full resync cannot be a ``remove_only`` run.
FULL_RESYNC_REMOVE_ONLY = "full_resync sends the source again, which a remove_only run never does"
#: A day, in seconds: how long an account the service did not find is held before it is sent again.
ONE_DAY = 86_400.0


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
    #: Removals allowed in one run: a count, a fraction of the recorded members, or ``None`` (any).
    max_removals: int | float | None = 0.25
    #: Whether a removing run may go on with a source that holds no rows at all.
    allow_empty_source: bool = False
    #: Seconds (on the service's clock) before an account the service did not find is sent again;
    #: ``None`` holds it until one of its values changes.
    retry_not_found_after: float | None = ONE_DAY
    #: Send every valid source row again and rebuild the recorded membership from the answers.
    full_resync: bool = False
    #: Days the run log keeps a run's rows; ``None`` keeps them all.
    log_retention_days: float | None = 30.0

    @property
    def removes(self) -> bool:
        """Whether this run removes members whose key left the source."""
        return self.mode in REMOVING_MODES

    @property
    def adds(self) -> bool:
        """Whether this run adds what joined the source."""
        return self.mode != "remove_only"


def check_delay(value: object, name: str) -> float | None:
    """``value`` as seconds (a number or a ``timedelta``) or ``None``; else ``ValueError`` naming ``name``."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    return check_number(seconds, name, 0, unit="seconds")


def check_options(options: SyncOptions) -> None:
    """Refuse options no run could use, naming the argument."""
    check_limit(options.max_removals, "max_removals")
    check_delay(options.retry_not_found_after, "retry_not_found_after")
    check_retention(options.log_retention_days)
    if options.full_resync and options.mode == "remove_only":
        raise ValueError(FULL_RESYNC_REMOVE_ONLY)


def check_retention(days: object) -> None:
    """Refuse a ``log_retention_days`` that is not a number of days above zero or ``None``."""
    if days is not None:
        check_number(days, "log_retention_days", 0, above=True, unit="days")
