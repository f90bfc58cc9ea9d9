"""``ListSync`` (``abm_provider.accounts.sync.engine``) end to end, through ``AccountListSyncOperator``:
whole runs against the emulator, with the state on DuckDB, PostgreSQL and MariaDB.

A run's steps have their own files, named for their modules: ``test_plan.py`` (what is sent, held or
refused), ``test_sending.py`` (what a request carries, removals first) and ``test_recording.py`` (a
rerun resumes after the last recorded batch). What reaches the service is read from the emulator's
request log and its admin view of the list, never from the operator's own summary; the warehouse is
read with the database's own driver.
"""

from __future__ import annotations

from typing import Any

import pytest
from sync_support import (
    COLUMNS,
    ORG,
    account_id,
    clear_requests,
    make_list,
    member_ids,
    membership_requests,
    rows_for,
    state_ids,
    sync,
)

from abm_provider.accounts.sync import SUMMARY_KEYS, engine
from support.warehouses import Warehouse

# ---- whole runs --------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_a_large_source_is_synced_then_only_the_change_is_sent_then_nothing(
    abm: Any, warehouse: Warehouse
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(100_000)))

    clear_requests(abm)
    first = sync(warehouse, list_id, "run_1")
    assert (first["to_add"], first["added"], first["to_remove"], first["removed"]) == (100_000, 100_000, 0, 0)
    assert membership_requests(abm) == {"add": 100, "remove": 0}
    assert member_ids(abm, list_id) == {account_id(n) for n in range(100_000)}

    # 1% changed: 500 accounts left the target set and 500 joined.
    changed = list(range(500, 100_500))
    warehouse.replace_table("targets", COLUMNS, rows_for(changed))
    clear_requests(abm)
    second = sync(warehouse, list_id, "run_2")
    assert (second["to_add"], second["added"], second["to_remove"], second["removed"]) == (500, 500, 500, 500)
    assert membership_requests(abm) == {"add": 1, "remove": 1}
    expected = {account_id(n) for n in changed}
    assert member_ids(abm, list_id) == expected
    assert state_ids(warehouse, list_id) == expected

    clear_requests(abm)
    third = sync(warehouse, list_id, "run_3")
    assert (third["to_add"], third["to_remove"], third["added"], third["removed"]) == (0, 0, 0, 0)
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert third["state_count"] == third["service_count"] == 100_000
    assert set(first) >= set(SUMMARY_KEYS)


def test_add_only_never_removes(abm: Any, warehouse: Warehouse) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(50)))
    sync(warehouse, list_id, "run_1", mode="add_only")
    warehouse.replace_table("targets", COLUMNS, rows_for(range(30, 60)))
    clear_requests(abm)
    second = sync(warehouse, list_id, "run_2", mode="add_only")
    assert (second["to_add"], second["to_remove"], second["removed"]) == (10, 0, 0)
    assert membership_requests(abm)["remove"] == 0
    assert member_ids(abm, list_id) == {account_id(n) for n in range(60)}


def test_dry_run_sends_nothing_and_reports_the_plan(abm: Any, warehouse: Warehouse, capsys: Any) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(20)))
    sync(warehouse, list_id, "run_1")
    warehouse.replace_table("targets", COLUMNS, [*rows_for(range(5, 27)), ("bad id", "Bad", ORG)])
    clear_requests(abm)
    capsys.readouterr()
    preview = sync(warehouse, list_id, "run_2", dry_run="true")
    assert preview["dry_run"] is True
    assert (preview["to_add"], preview["to_remove"], preview["rejected"]) == (7, 5, 1)
    assert (preview["added"], preview["removed"]) == (0, 0)
    assert membership_requests(abm) == {"add": 0, "remove": 0}
    assert member_ids(abm, list_id) == {account_id(n) for n in range(20)}
    assert state_ids(warehouse, list_id) == {account_id(n) for n in range(20)}
    assert f"e.g. to add: {account_id(20)}@{ORG}" in capsys.readouterr().out
    # The preview recorded no reject, so the real run counts (and records) the bad row.
    real = sync(warehouse, list_id, "run_2", max_rejected=1)
    assert (real["dry_run"], real["added"], real["removed"], real["rejected"]) == (False, 7, 5, 1)
    assert member_ids(abm, list_id) == {account_id(n) for n in range(5, 27)}


def test_an_edit_during_a_run_is_sent_by_the_next_run(
    abm: Any, warehouse: Warehouse, monkeypatch: Any
) -> None:
    list_id = make_list()
    warehouse.replace_table("targets", COLUMNS, rows_for(range(10)))
    original = engine.ListSync._send_run

    def edit_then_send(self: Any, run: Any) -> None:
        # Through the sync's own connection: DuckDB allows one configuration per file in a process.
        for row in rows_for(range(10, 12)):
            self.db.execute(f"INSERT INTO {warehouse.name('targets')} VALUES ({self.db.marks(3)})", row)
        self.db.conn.commit()
        original(self, run)

    monkeypatch.setattr(engine.ListSync, "_send_run", edit_then_send)
    first = sync(warehouse, list_id, "run_1")
    monkeypatch.setattr(engine.ListSync, "_send_run", original)
    assert first["added"] == 10
    assert member_ids(abm, list_id) == state_ids(warehouse, list_id) == {account_id(n) for n in range(10)}
    second = sync(warehouse, list_id, "run_2")
    assert second["added"] == 2
    assert member_ids(abm, list_id) == {account_id(n) for n in range(12)}
