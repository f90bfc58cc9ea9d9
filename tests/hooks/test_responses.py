"""``abm_provider.hooks._responses``: JSON from a server is refused past its depth before it is parsed.

A hostile body of 100,000 nested brackets used to go to ``json.loads``, which recursed until the
interpreter's limit and was stopped there. A garbage collection that happened down there ran other
objects' finalizers with no stack left; they failed as "unraisable" exceptions that fail whichever
test is running (seen once in CI, in ``test_download_reads_a_deep_error_body``). These tests make the
collector run at every allocation, so a deep parse is caught deterministically.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from abm_provider.hooks._responses import nests_deeper, parse_error_body, parse_json

DEEP = b"[" * 100_000 + b"]" * 100_000


def _climb(levels: int) -> int:
    return 0 if levels == 0 else 1 + _climb(levels - 1)


@pytest.fixture
def stack_left_at_every_collection() -> Iterator[list[str]]:
    """What a finalizer would meet: each collection calls Python 50 frames deep and notes a failure."""
    failures: list[str] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        try:
            _climb(50)
        except RecursionError:
            failures.append(phase)

    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1)
    try:
        yield failures
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)


def test_a_deep_body_is_refused_without_using_up_the_stack(stack_left_at_every_collection: list[str]) -> None:
    with pytest.raises(ValueError, match="nested deeper than 32 levels"):
        parse_json(DEEP, 32)
    assert stack_left_at_every_collection == []


def test_a_deep_error_body_gives_a_message_without_using_up_the_stack(
    stack_left_at_every_collection: list[str],
) -> None:
    error = parse_error_body(400, b'{"error": {"details": ' + DEEP + b"}}")
    assert error.message
    assert stack_left_at_every_collection == []


@pytest.mark.parametrize(
    ("body", "deeper"),
    [
        (b"[[[]]]", False),
        (b"[[[[]]]]", True),
        (b'[["[[[[[[["]]', False),  # brackets inside a string do not nest
        (b'[{"a": "\\"[[[[[", "b": [1]}]', False),  # nor after an escaped quote
        (b'{"a": {"b": {"c": {"d": 1}}}}', True),
        (b'{"a": [1], "b": {"c": [{"d": 1}]}}', True),  # one deep branch beside a shallow one
        (b"[" + b'{"id": "1"}, ' * 50 + b"[[[]]]]", True),  # deep after many shallow ones
        (b"[" + b'{"id": "1"}, ' * 50 + b"[[]]]", False),
        (b"[[}}", False),  # unpaired: counted as they open and close
        (b"[[[[}", True),
    ],
)
def test_nesting_is_counted_outside_strings(body: bytes, deeper: bool) -> None:
    assert nests_deeper(body, 3) is deeper


def test_depth_at_the_limit_still_parses() -> None:
    assert parse_json(b"[[[1]]]", 3) == [[[1]]]
