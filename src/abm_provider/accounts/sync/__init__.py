"""Keeping an account list in step with a source: the state tables, the diff, sending and recording.

:class:`~abm_provider.accounts.sync.engine.ListSync` does the work; ``AccountListSyncOperator`` (in
:mod:`abm_provider.operators.account_lists`) runs it as a task.
"""

from __future__ import annotations

from abm_provider.accounts.sync.engine import MODES, SUMMARY_KEYS, ListSync, SyncOptions
from abm_provider.accounts.sync.lock import SyncAlreadyRunning
from abm_provider.accounts.sync.state import DEFAULT_PREFIX, StateTables

__all__ = [
    "DEFAULT_PREFIX",
    "MODES",
    "SUMMARY_KEYS",
    "ListSync",
    "StateTables",
    "SyncAlreadyRunning",
    "SyncOptions",
]
