"""Deprecated: the list sync moved to :mod:`abm_provider.accounts.sync`; this alias goes in the next release.

``from abm_provider.sync import SyncAlreadyRunning`` was documented, so it keeps working for one
release with a ``DeprecationWarning``; import it from :mod:`abm_provider.exceptions` instead.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: The names this module used to export, and where each lives now.
_MOVED = {
    "SyncAlreadyRunning": "abm_provider.exceptions",
    "DEFAULT_PREFIX": "abm_provider.accounts.sync",
    "MODES": "abm_provider.accounts.sync",
    "SUMMARY_KEYS": "abm_provider.accounts.sync",
    "ListSync": "abm_provider.accounts.sync",
    "StateTables": "abm_provider.accounts.sync",
    "SyncOptions": "abm_provider.accounts.sync",
}


def __getattr__(name: str) -> Any:
    """Return a moved name from its new home, warning once per use site."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"abm_provider.sync.{name} is deprecated; import it from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
