"""Tiered audiences: one source kept in step with many account lists, each account on one of them.

:class:`~abm_provider.accounts.audiences.engine.AudienceSync` tiers the source in the warehouse
(``tiering``), plans every list with the list sync's planner, checks the programme's guards
(``guards``), sends every removal before any addition, and logs the moves between lists (``moves``).
``AccountAudienceSyncOperator`` (in :mod:`abm_provider.operators.audiences`) runs it as a task.
"""

from __future__ import annotations

from abm_provider.accounts.audiences.engine import Audience, AudienceSync
from abm_provider.accounts.audiences.tiering import Exclusion

__all__ = ["Audience", "AudienceSync", "Exclusion"]
