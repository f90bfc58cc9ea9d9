"""The download's background writer keeps chunk order and never hides a failed write."""

from __future__ import annotations

import io
import threading

import pytest

from abm_provider.hooks._writer import OrderedWriter


class _SlowFile(io.BytesIO):
    """Records which thread wrote, and can fail from the n-th write on."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.calls = 0
        self.threads: set[str] = set()

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise OSError(28, "No space left on device")
        return super().write(data)


def test_chunks_arrive_whole_and_in_order_before_the_block_ends() -> None:
    target = _SlowFile()
    chunks = [bytes([i % 256]) * (1000 + i) for i in range(300)]
    with OrderedWriter(target) as out:
        for chunk in chunks:
            out.write(chunk)
    assert target.getvalue() == b"".join(chunks)
    assert target.threads == {"abm-download-writer"}


def test_a_failed_write_is_raised_to_the_producer() -> None:
    target = _SlowFile(fail_at=3)
    with pytest.raises(OSError, match="No space left"), OrderedWriter(target) as out:
        for _ in range(100):
            out.write(b"x" * 10)
    assert target.calls == 3, "writes stop at the first failure"


def test_a_failed_write_wins_over_the_error_that_ended_the_block() -> None:
    """A short file must not be resumed as if only the connection had dropped."""
    target = _SlowFile(fail_at=1)
    with pytest.raises(OSError) as info, OrderedWriter(target) as out:
        out.write(b"x")
        raise ConnectionError("dropped")
    assert isinstance(info.value.__cause__, ConnectionError)
