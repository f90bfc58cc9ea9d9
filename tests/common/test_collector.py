"""``fewer_collections``: the collector's thresholds are raised for a streaming block and put back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from abm_provider.common.collector import STREAMING_THRESHOLD, fewer_collections


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*before)


def test_the_young_threshold_is_raised_inside_and_restored_after(thresholds):
    with fewer_collections():
        assert gc.get_threshold() == (STREAMING_THRESHOLD, 10, 10)
    assert gc.get_threshold() == thresholds


def test_thresholds_are_restored_when_the_block_fails(thresholds):
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("source failed")
    assert gc.get_threshold() == thresholds


@pytest.mark.parametrize("young", [0, STREAMING_THRESHOLD * 2])
def test_a_disabled_or_higher_threshold_is_left_alone(young):
    before = gc.get_threshold()
    gc.set_threshold(young, 10, 10)
    try:
        with fewer_collections():
            assert gc.get_threshold() == (young, 10, 10)
        assert gc.get_threshold() == (young, 10, 10)
    finally:
        gc.set_threshold(*before)
