"""The run says which lock keeps it alone, as its state database's dialect declares (``lock.py``).

A warehouse with no lock between sessions (any common-sql database the provider does not know) takes
this process's lock, and says in the log that a sync in another process is not kept out, rather than
leaving a reader to assume the database's lock held.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from abm_provider.accounts.sync.database import StateDatabase
from abm_provider.accounts.sync.lock import hold_list_lock
from support.warehouses import SqliteTestHook


def test_a_state_database_without_session_locks_warns_that_only_this_process_is_locked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = StateDatabase(SqliteTestHook(tmp_path / "state.sqlite"))
    try:
        with caplog.at_level(logging.INFO, logger="test.lock"):
            hold_list_lock(db, "abm_sync:test:list:L1", "L1", "run_1", 0.0, logging.getLogger("test.lock"))
    finally:
        db.close()
    (record,) = [r for r in caplog.records if "lock is" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "List L1's lock is this process's only: the generic dialect has no lock between sessions" in (
        record.getMessage()
    )
