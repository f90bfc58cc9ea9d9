"""Fewer garbage-collector passes while a task streams millions of short-lived rows.

Why: an account sync holds each batch (a thousand rows, each a few dicts and tuples) for a moment,
long enough for CPython's young-generation passes (every 700 net allocations) to promote them.
The promoted rows then trigger full passes, and every full pass walks all of Airflow's and the
provider's own objects again; a higher young threshold saves about a third of the CPU of reading,
validating, batching and encoding (docs/performance.md, "Figures behind design choices"). The rows
hold no reference cycles, so reference counting frees them either way; only cycle detection is made
less frequent, and the thresholds are put back when the block ends.
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
