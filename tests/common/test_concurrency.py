"""``abm_provider.common.concurrency``: calls run a few at once, their answers come back in item order.

The add/remove operators and the list sync send their batches through ``in_order``; here it is held
to its promises directly: source order whatever order the calls finish in, never more than
``max_in_flight`` calls at once (and that many when there is work), a failed call raised at its
turn after the answers before it, a failing source raised after every item already taken is
answered. Waiting is on events with a bound, never on sleeps.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from abm_provider.common.concurrency import MAX_IN_FLIGHT, PerThread, check_in_flight, in_order

WAIT = 30  # seconds an event may take before the test fails instead of hanging


# --- check_in_flight ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 4, MAX_IN_FLIGHT])
def test_a_whole_number_in_range_is_accepted(value: int) -> None:
    assert check_in_flight(value) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, f"batches_at_once must be between 1 and {MAX_IN_FLIGHT}, got 0"),
        (
            MAX_IN_FLIGHT + 1,
            f"batches_at_once must be between 1 and {MAX_IN_FLIGHT}, got {MAX_IN_FLIGHT + 1}",
        ),
        (-3, "got -3"),
        (True, "batches_at_once must be a whole number, got True"),
        (2.0, "batches_at_once must be a whole number, got 2.0"),
        ("4", "batches_at_once must be a whole number, got '4'"),
        (None, "batches_at_once must be a whole number, got None"),
    ],
)
def test_anything_else_is_refused_naming_the_argument(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_in_flight(value, "batches_at_once")


def test_in_order_checks_max_in_flight_before_calling() -> None:
    calls: list[int] = []
    with pytest.raises(ValueError, match="max_in_flight must be between 1 and"):
        list(in_order(calls.append, [1, 2], 0, "t"))
    assert calls == []


# --- in_order ---------------------------------------------------------------------------------------


class Running:
    """Counts the calls running at once, the most seen, and the items called, across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.peak = 0
        self.called: list[int] = []

    def enter(self, item: int) -> int:
        """A call of ``item`` starts; returns how many run now."""
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.called.append(item)
            return self.now

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def test_answers_come_in_item_order_whatever_order_the_calls_finish_in() -> None:
    """Each call waits for the one after it, so they finish last item first; the answers do not."""
    finished = {n: threading.Event() for n in range(5)}
    done_order: list[int] = []
    lock = threading.Lock()

    def call(n: int) -> str:
        if n + 1 in finished:
            assert finished[n + 1].wait(WAIT), f"call {n + 1} never finished"
        with lock:
            done_order.append(n)
        finished[n].set()
        return f"answer {n}"

    got = list(in_order(call, range(5), 5, "order"))

    assert got == [(n, f"answer {n}") for n in range(5)]
    assert done_order == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("max_in_flight", [1, 3])
def test_never_more_than_max_in_flight_calls_at_once_and_that_many_when_there_is_work(
    max_in_flight: int,
) -> None:
    running = Running()
    full = threading.Event()

    def call(n: int) -> int:
        if running.enter(n) == max_in_flight:
            full.set()
        # Hold the call until the pool is full (or it cannot fill any more: the last items).
        full.wait(2)
        running.leave()
        return n * n

    got = list(in_order(call, range(12), max_in_flight, "bounded"))

    assert [answer for _, answer in got] == [n * n for n in range(12)]
    assert running.peak == max_in_flight


def test_a_failed_call_raises_at_its_turn_after_the_answers_before_it() -> None:
    def call(n: int) -> int:
        if n == 3:
            raise RuntimeError("batch 3 refused")
        return n

    answers: list[int] = []
    with pytest.raises(RuntimeError, match="batch 3 refused"):
        for _, answer in in_order(call, range(8), 2, "fails"):
            answers.append(answer)
    assert answers == [0, 1, 2]


def test_a_failing_source_is_raised_after_every_item_already_taken_is_answered() -> None:
    def source() -> Iterator[int]:
        yield from range(3)
        raise OSError("the file went away")

    answers: list[tuple[int, int]] = []
    with pytest.raises(OSError, match="the file went away"):
        for item, answer in in_order(lambda n: n + 100, source(), 4, "source"):
            answers.append((item, answer))
    assert answers == [(0, 100), (1, 101), (2, 102)]


@pytest.mark.parametrize(("queued", "started"), [(0, 1), (3, 4)])
def test_queued_items_start_while_the_consumer_holds_never_more_at_once(queued: int, started: int) -> None:
    """The list sync stops between answers to record a group; the queued batches go on meanwhile."""
    running = Running()
    enough = threading.Event()

    def call(n: int) -> int:
        running.enter(n)
        if len(running.called) == started:
            enough.set()
        running.leave()
        return n

    answers = in_order(call, range(10), 1, "queued", queued=queued)
    assert next(answers) == (0, 0)
    assert enough.wait(WAIT)  # the consumer holds; the queued items were called all the same
    with running.lock:
        assert len(running.called) == started
    assert [item for item, _ in answers] == list(range(1, 10))
    assert running.peak == 1


@pytest.mark.parametrize("queued", [-1, 1.5, True])
def test_queued_must_be_a_whole_number(queued: object) -> None:
    with pytest.raises(ValueError, match="queued must be a whole number"):
        list(in_order(lambda n: n, [1], 1, "t", queued=queued))  # type: ignore[arg-type]


def test_no_items_no_calls() -> None:
    calls: list[int] = []
    assert list(in_order(calls.append, [], 3, "empty")) == []
    assert calls == []


def test_calls_run_on_named_threads_other_than_the_caller() -> None:
    names = [name for _, name in in_order(lambda _: threading.current_thread().name, range(3), 2, "abm-add")]
    assert all(name.startswith("abm-add") for name in names), names
    assert threading.current_thread().name not in names


# --- PerThread --------------------------------------------------------------------------------------


class Session:
    made = 0

    def __init__(self) -> None:
        Session.made += 1
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_one_object_per_thread_made_on_first_use_and_each_closed_once() -> None:
    Session.made = 0
    sessions = PerThread(Session)
    mine = sessions.get()
    assert sessions.get() is mine

    others: list[Session] = []
    started = threading.Barrier(3)

    def worker() -> None:
        started.wait(WAIT)  # both threads alive at once, so neither reuses the other's identity
        first = sessions.get()
        assert sessions.get() is first
        others.append(first)
        started.wait(WAIT)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    started.wait(WAIT)
    started.wait(WAIT)
    for thread in threads:
        thread.join(WAIT)

    made = [mine, *others]
    assert Session.made == 3 and len({id(s) for s in made}) == 3
    sessions.close()
    assert [s.closed for s in made] == [1, 1, 1]
    sessions.close()  # nothing left to close: closing again closes nothing twice
    assert [s.closed for s in made] == [1, 1, 1]
