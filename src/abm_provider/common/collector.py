"""Fewer and shorter garbage-collector passes while a task streams or syncs millions of rows.

Why (:func:`fewer_collections`): an account sync holds each batch (a thousand rows, each a few dicts
and tuples) for a moment, long enough for CPython's young-generation passes (every 700 net allocations)
to promote them. The promoted rows then trigger full passes, and every full pass walks all of Airflow's
and the provider's own objects again; a higher young threshold saves about a third of the CPU of
reading, validating, batching and encoding (docs/performance.md, "Figures behind design choices"). The
rows hold no reference cycles, so reference counting frees them either way; only cycle detection is
made less frequent, and the thresholds are put back when the block ends.

Why (:func:`frozen_heap`): a task process holds Airflow's and the provider's modules, several hundred
thousand objects, and each full pass walks them all; a sync that imports a hook or a driver part-way
makes enough new long-lived objects for a few such passes (docs/performance.md has their cost). The
objects alive when the sync starts are left out of the passes for its length: they live on anyway.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Net container allocations between young-generation passes while streaming (CPython default: 700).
STREAMING_THRESHOLD = 50_000


@contextmanager
def fewer_collections(young: int = STREAMING_THRESHOLD) -> Iterator[None]:
    """Raise the young-generation threshold to at least ``young`` for the block, then restore it.

    A threshold of 0 (collection turned off by the process's owner) is left alone, as is a higher one.
    """
    before = gc.get_threshold()
    if before[0] == 0 or before[0] >= young:
        yield
        return
    gc.set_threshold(young, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Leave the objects alive now out of every collector pass until the block ends (``gc.freeze``).

    They are given back to the collector at the end, unless the process had frozen some already (a
    parent that froze its heap before forking): that owner's choice is left as it was.
    """
    owner = gc.get_freeze_count() == 0
    gc.freeze()
    try:
        yield
    finally:
        if owner:
            gc.unfreeze()
