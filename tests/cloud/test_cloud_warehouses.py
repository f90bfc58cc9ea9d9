"""The rules of the emulator fixtures themselves (support.cloud_warehouses)."""

from __future__ import annotations

import pytest

from support.cloud_warehouses import require


def test_a_missing_emulator_fails_the_test_rather_than_skipping_it() -> None:
    with pytest.raises(pytest.fail.Exception, match="not installed.*make install"):
        require("abm_no_such_emulator", "an emulator")
    require("fakesnow", "fakesnow")
    require("bqemulator", "bqemulator")
