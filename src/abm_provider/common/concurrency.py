"""Run one call per item with a few at once, and hand back the answers in the items' order.

Adding and removing accounts are idempotent and independent of order, so batches can travel side by
side: with one request at a time the service waits while the next batch is read, and the worker
waits while the service works; with a remote service the round trip sets the pace. The answers are
still consumed in source order, so counts, rejects and recorded progress come out exactly as a
one-at-a-time sync would produce them. Used by the add/remove operators and by the list sync.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, Protocol, TypeVar

from abm_provider.common.arguments import check_whole

T = TypeVar("T")
R = TypeVar("R")


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)

#: Most requests one task keeps open at once.
MAX_IN_FLIGHT = 8


def check_in_flight(value: object, name: str = "max_in_flight") -> int:
    """Return ``value`` if it is a whole number in ``1..MAX_IN_FLIGHT``, else raise naming ``name``."""
    return check_whole(value, name, 1, MAX_IN_FLIGHT)


def in_order(
    call: Callable[[T], R],
    items: Iterable[T],
    max_in_flight: int,
    thread_name: str,
    *,
    queued: int = 0,
) -> Iterator[tuple[T, R]]:
    """Yield ``(item, call(item))`` in item order, with up to ``max_in_flight`` calls running.

    ``queued`` more items may be taken and wait their turn behind the running calls: a consumer that
    stops between answers (to record a group of them) leaves the calls work to start meanwhile,
    without more of them running at once.

    A failed call raises when its turn comes: calls not yet started are cancelled, running ones
    finish. When reading the items fails, the items already taken are still answered first, then
    the error is raised, so nothing already sent goes uncounted.
    """
    check_in_flight(max_in_flight)
    check_whole(queued, "queued", 0)
    pending: deque[tuple[T, Future[R]]] = deque()
    pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix=thread_name)
    source = iter(items)
    try:
        while True:
            try:
                item = next(source)
            except StopIteration:
                break
            except BaseException:
                while pending:
                    taken, future = pending.popleft()
                    yield taken, future.result()
                raise
            while len(pending) >= max_in_flight + queued:
                taken, future = pending.popleft()
                yield taken, future.result()
            pending.append((item, pool.submit(call, item)))
        while pending:
            taken, future = pending.popleft()
            yield taken, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class PerThread(Generic[C]):
    """One object per sending thread, made on first use: a hook's HTTP session is not shared."""

    def __init__(self, factory: Callable[[], C]) -> None:
        self.factory = factory
        self._local = threading.local()
        self._made: list[C] = []
        self._lock = threading.Lock()

    def get(self) -> C:
        """This thread's object."""
        found: C | None = getattr(self._local, "value", None)
        if found is None:
            found = self._local.value = self.factory()
            with self._lock:
                self._made.append(found)
        return found

    def close(self) -> None:
        """Close every object made (call once the threads are done)."""
        with self._lock:
            made, self._made = self._made, []
        for value in made:
            value.close()
