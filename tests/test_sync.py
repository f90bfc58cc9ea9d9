"""``abm_provider.sync``: the list sync's old import path keeps working, with a warning, for one release."""

from __future__ import annotations

import pytest

from abm_provider.accounts.sync import ListSync
from abm_provider.exceptions import SyncAlreadyRunning


def test_old_path_still_gives_the_exception_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"sync\.SyncAlreadyRunning.*exceptions"):
        from abm_provider.sync import SyncAlreadyRunning as old

    assert old is SyncAlreadyRunning


def test_old_path_still_gives_the_engine() -> None:
    with pytest.warns(DeprecationWarning, match="abm_provider.accounts.sync"):
        from abm_provider.sync import ListSync as old

    assert old is ListSync


def test_a_name_it_never_had_is_an_attribute_error() -> None:
    import abm_provider.sync as alias

    with pytest.raises(AttributeError, match="no attribute 'engine_v2'"):
        _ = alias.engine_v2
