"""``fewer_collections``: the collector's thresholds are raised for a streaming block and put back.
``frozen_heap``: the objects alive at the start are out of the collector's passes inside the block, and
back in them after, unless the process had frozen its heap itself."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from abm_provider.common.collector import STREAMING_THRESHOLD, fewer_collections, frozen_heap


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


class _Cycle:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_alive_at_the_start_are_left_out_of_passes_inside_and_put_back_after(unfrozen):
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    with frozen_heap():
        del cycle  # garbage from now on, freed by a collector pass only
        gc.collect()
        assert alive() is not None, "a pass inside the block walked an object alive at its start"
    gc.collect()
    assert alive() is None, "the objects were not given back to the collector"


def test_the_block_gives_the_heap_back_when_it_fails(unfrozen):
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("sync failed")
    assert gc.get_freeze_count() == 0


def test_a_heap_the_process_froze_itself_stays_frozen(unfrozen):
    gc.freeze()
    frozen = gc.get_freeze_count()
    with frozen_heap():
        pass
    assert gc.get_freeze_count() >= frozen > 0
