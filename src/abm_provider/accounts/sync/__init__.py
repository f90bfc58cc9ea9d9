"""Keeping an account list in step with a source: the state tables, the diff, sending and recording.

:class:`~abm_provider.accounts.sync.engine.ListSync` runs a sync through its steps: ``plan`` (the
diff), ``sending``, ``recording`` and ``summary``, over the tables of ``state``, reached through
``database`` and kept to one sync of a list at a time by ``lock``. Their SQL is in ``statements``, one
module per concern, written once for every dialect. ``AccountListSyncOperator`` (in
:mod:`abm_provider.operators.account_lists`) runs it as a task.
"""

from __future__ import annotations

from abm_provider.accounts.sync.engine import ListSync
from abm_provider.accounts.sync.lock import SyncAlreadyRunning
from abm_provider.accounts.sync.options import MODES, SyncOptions
from abm_provider.accounts.sync.state import DEFAULT_PREFIX, StateTables
from abm_provider.accounts.sync.summary import SUMMARY_KEYS

__all__ = [
    "DEFAULT_PREFIX",
    "MODES",
    "SUMMARY_KEYS",
    "ListSync",
    "StateTables",
    "SyncAlreadyRunning",
    "SyncOptions",
]
