"""The service's clock, as the list sync measures the delay before an account not found is sent again.

An account the service does not know today is usually one it imports from the CRM tomorrow, so the
sync sends it again once ``retry_not_found_after`` has passed. The delay is measured on the service's
clock (the ``Date`` of one answer at the start of a run), so a worker whose clock is off neither
retries early nor late, and a test can move the emulator's clock instead of waiting a day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from abm_provider.accounts.sync.state import utc_now


@dataclass
class ServiceClock:
    """The local UTC clock shifted by how far the service's clock was from it when last read."""

    offset: timedelta = timedelta(0)

    def now(self) -> datetime:
        """The service's time now, as the state tables keep times (UTC to the second, no zone)."""
        return utc_now() + self.offset

    def set_to(self, service_time: datetime) -> None:
        """Align with ``service_time`` (aware, or naive UTC) read from an answer just now."""
        if service_time.tzinfo is not None:
            service_time = service_time.astimezone(UTC).replace(tzinfo=None)
        self.offset = service_time.replace(microsecond=0) - utc_now()
