"""The service's clock, as the list sync measures the delay before an account not found is sent again.

An account the service does not know today is usually one it imports from the CRM tomorrow, so the
sync sends it again once ``retry_not_found_after`` has passed. The delay is measured on the service's
clock (the ``Date`` of one answer, read the first time a run needs the time), so a worker whose clock
is off neither retries early nor late, and a test can move the emulator's clock instead of waiting a
day.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from abm_provider.accounts.sync.state import utc_now

if TYPE_CHECKING:
    from abm_provider.hooks.abm import AbmHook

#: How far the service's clock may be from the worker's before a run says so.
_CLOCK_SKEW = timedelta(minutes=5)


@dataclass
class ServiceClock:
    """The local UTC clock shifted by how far the service's clock was from it when last read."""

    offset: timedelta = timedelta(0)
    #: Reads the service's clock into this one the first time :meth:`now` is asked, if set.
    _reader: Callable[[ServiceClock], None] | None = field(default=None, repr=False)

    def read_on_first_use(self, reader: Callable[[ServiceClock], None]) -> None:
        """Have the first :meth:`now` call ``reader`` first: a run that records no refusal and holds
        none back (most runs of a list in step) never asks the service for its time."""
        self._reader = reader

    def now(self) -> datetime:
        """The service's time now, as the state tables keep times (UTC to the second, no zone)."""
        if self._reader is not None:
            reader, self._reader = self._reader, None
            reader(self)
        return utc_now() + self.offset

    def set_to(self, service_time: datetime) -> None:
        """Align with ``service_time`` (aware, or naive UTC) read from an answer just now."""
        if service_time.tzinfo is not None:
            service_time = service_time.astimezone(UTC).replace(tzinfo=None)
        self.offset = service_time.replace(microsecond=0) - utc_now()


def read_service_clock_when_used(
    clock: ServiceClock, new_hook: Callable[[], AbmHook], log: logging.Logger | Any
) -> None:
    """Align ``clock`` with the service's (:func:`read_service_clock`) when it is first read."""
    clock.read_on_first_use(lambda used: read_service_clock(used, new_hook, log))


def read_service_clock(
    clock: ServiceClock, new_hook: Callable[[], AbmHook], log: logging.Logger | Any
) -> None:
    """Align ``clock`` with the service's (one cheap request), and warn when the two are far apart."""
    hook = new_hook()
    try:
        clock.set_to(hook.service_time())
    finally:
        hook.close()
    if abs(clock.offset) > _CLOCK_SKEW:
        log.warning(
            "The service's clock is %s away from this worker's; not-found retries are timed by the service's",
            clock.offset,
        )
