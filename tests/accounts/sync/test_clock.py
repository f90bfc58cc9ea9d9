"""``abm_provider.accounts.sync.clock``: an account the service does not know is sent again once
``retry_not_found_after`` has passed on the service's clock, never on the worker's; ``None`` holds it
until its row changes. Whole syncs against the emulator, whose clock the tests move.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sync_support import (
    COLUMNS,
    NOT_FOUND,
    ORG,
    clear_requests,
    make_list,
    rows_for,
    sent_ids,
    sync,
)

from support.warehouses import Warehouse

HOUR = 3600


def test_a_not_found_account_is_sent_again_only_after_the_delay_on_the_service_clock(
    abm: Any, warehouse: Warehouse
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, [*rows_for(range(2)), (NOT_FOUND, "Ghost", ORG)])
    assert sync(warehouse, list_id, "run_1")["not_found"] == 1

    abm.advance(23 * HOUR)
    clear_requests(abm)
    early = sync(warehouse, list_id, "run_2")
    assert (early["to_add"], early["held"]) == (0, 1)
    assert sent_ids(abm) == []

    abm.advance(2 * HOUR)
    late = sync(warehouse, list_id, "run_3")
    assert (late["to_add"], late["not_found"], late["held"]) == (1, 1, 0)
    assert sent_ids(abm) == [NOT_FOUND]
    # The new refusal replaced the old one: one reject, timed by the service's clock.
    rejects = warehouse.query(
        f"SELECT run_id, recorded_at FROM {warehouse.name('abm_sync_rejects')} WHERE account_id = %s",
        [NOT_FOUND],
    )
    assert [r[0] for r in rejects] == ["run_3"]
    service_now = datetime.fromisoformat(abm.clock()["now"].replace("Z", "+00:00")).astimezone(UTC)
    assert abs(rejects[0][1] - service_now.replace(tzinfo=None)) < timedelta(minutes=2)


def test_retry_not_found_after_none_holds_until_the_row_changes(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, [(NOT_FOUND, "Ghost", ORG)])
    sync(warehouse, list_id, "run_1", retry_not_found_after=None)
    abm.advance(30 * 24 * HOUR)
    clear_requests(abm)
    assert sync(warehouse, list_id, "run_2", retry_not_found_after=None)["held"] == 1
    assert sent_ids(abm) == []


def _clock_reads(abm: Any) -> int:
    """How many times the service's clock was read (a one-folder page) since the log was cleared."""
    return sum(
        1
        for seen in abm.requests_seen()
        if seen.get("method") == "GET" and str(seen.get("path", "")).split("?", 1)[0].endswith("/folders")
    )


def test_the_service_clock_is_read_only_when_a_run_needs_the_time(abm: Any, warehouse: Warehouse) -> None:
    """A run with no refusal to record or hold back (a list in step) makes no request for the time;
    one that records an account not found reads the service's clock once, to time the reject."""
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(3)))
    sync(warehouse, list_id, "run_1")
    clear_requests(abm)
    assert sync(warehouse, list_id, "run_2")["to_add"] == 0
    assert _clock_reads(abm) == 0

    warehouse.replace_table("targets", COLUMNS, [*rows_for(range(3)), (NOT_FOUND, "Ghost", ORG)])
    clear_requests(abm)
    assert sync(warehouse, list_id, "run_3")["not_found"] == 1
    assert _clock_reads(abm) == 1
