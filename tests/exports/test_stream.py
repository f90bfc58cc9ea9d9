"""``ExportStream``: one download handed to the loader's readers as it arrives, settled before the commit.

The download here is a function that hands out slices of a known file, through one buffer it
reuses (as the real download does), and returns the archive's summary. The readers run on threads
of their own, as the warehouse's readers do. Waiting is on events and joins with a bound.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from abm_provider.exports.pipe import BytePipe, StreamBroken
from abm_provider.exports.stream import ExportStream, Settled, StreamCancelled

WAIT = 30  # seconds a thread may take before the test fails instead of hanging
SLICE = 256 << 10
DATA = random.Random(7).randbytes(5 * (1 << 20) + 12_345)
SUMMARY = {"sha256": hashlib.sha256(DATA).hexdigest(), "bytes": len(DATA)}

Tee = Callable[[bytes], None]


class Download:
    """A download of ``DATA`` in slices of one reused buffer; ``then`` runs after the last byte."""

    def __init__(self, *, fail_at: int | None = None, then: Callable[[], None] | None = None) -> None:
        self.fail_at, self.then = fail_at, then
        self.sent = 0
        self.cancelled = threading.Event()

    def __call__(self, tee: Tee, received: Callable[[], None]) -> dict[str, Any]:
        buffer = bytearray(SLICE)
        try:
            for offset in range(0, len(DATA), SLICE):
                if self.fail_at is not None and offset >= self.fail_at:
                    raise ConnectionResetError("the storage origin closed the connection")
                piece = DATA[offset : offset + SLICE]
                buffer[: len(piece)] = piece
                tee(memoryview(buffer)[: len(piece)])
                self.sent += len(piece)
        except StreamCancelled:
            self.cancelled.set()
            raise
        received()
        if self.then is not None:
            self.then()
        return dict(SUMMARY)


def read_all(pipe: BytePipe) -> bytes:
    return b"".join(pipe.chunks())


def reading(pipes: list[BytePipe]) -> tuple[ThreadPoolExecutor, list[Future[bytes]]]:
    pool = ThreadPoolExecutor(max_workers=max(len(pipes), 1), thread_name_prefix="reader")
    return pool, [pool.submit(read_all, pipe) for pipe in pipes]


def stream_of(download: Download) -> ExportStream:
    return ExportStream(download, log=logging.getLogger("test_stream"), name="exec-1")


def test_every_reader_gets_every_byte_and_settle_returns_what_the_ledger_records() -> None:
    """Two readers, each sent the whole file from the first byte, though the download reuses its buffer."""
    stream = stream_of(Download())
    pool, reads = reading(stream.open(2))
    with pool:
        assert [r.result(WAIT) for r in reads] == [DATA, DATA]
    assert stream.settle() == Settled(SUMMARY["sha256"], len(DATA))
    assert stream.read_as_it_arrived and not stream.broken and stream.failure is None


def test_readers_see_the_end_once_the_last_byte_is_in_before_the_checks_finish() -> None:
    """The checks and the archive's rename run after the readers have their end of stream."""
    reader_finished = threading.Event()

    def checks() -> None:
        assert reader_finished.wait(WAIT), "the reader did not see the end until the checks were done"

    stream = stream_of(Download(then=checks))
    (pipe,) = stream.open(1)
    pool, (read,) = reading([pipe])
    with pool:
        read.add_done_callback(lambda _: reader_finished.set())
        assert read.result(WAIT) == DATA
    assert stream.settle().size == len(DATA)


def test_a_broken_download_breaks_every_reader_and_settle_raises_with_its_error() -> None:
    download = Download(fail_at=2 * (1 << 20))
    stream = stream_of(download)
    pool, reads = reading(stream.open(2))
    with pool:
        for read in reads:
            with pytest.raises(StreamBroken):
                read.result(WAIT)
    with pytest.raises(StreamBroken, match="the download of exec-1 failed") as info:
        stream.settle()
    assert isinstance(info.value.__cause__, ConnectionResetError)
    assert stream.broken and isinstance(stream.failure, ConnectionResetError)
    assert download.sent == 2 * (1 << 20)


def test_a_check_that_fails_after_the_last_byte_fails_settle_though_the_readers_read_it_all() -> None:
    """The reader saw a whole file; only ``settle`` (before the commit) learns it is not the right one."""

    def hash_mismatch() -> None:
        raise ValueError("SHA-256 does not match the manifest")

    stream = stream_of(Download(then=hash_mismatch))
    pool, (read,) = reading(stream.open(1))
    with pool:
        assert read.result(WAIT) == DATA
    with pytest.raises(StreamBroken, match="SHA-256 does not match"):
        stream.settle()
    assert stream.broken


def test_a_reader_that_stops_early_does_not_hold_the_download_back() -> None:
    """The pipes hold a few chunks; a reader that took one and left must not stall the rest."""
    download = Download()
    stream = stream_of(download)
    (pipe,) = stream.open(1)
    assert pipe.read(10) == DATA[:10]
    assert stream.settle() == Settled(SUMMARY["sha256"], len(DATA))
    assert download.sent == len(DATA)


def test_settle_without_readers_runs_the_download_alone() -> None:
    download = Download()
    stream = stream_of(download)
    assert stream.settle() == Settled(SUMMARY["sha256"], len(DATA))
    assert not stream.read_as_it_arrived and download.sent == len(DATA)


def test_a_stream_opens_once() -> None:
    stream = stream_of(Download())
    stream.open(1)
    with pytest.raises(RuntimeError, match="the stream of exec-1 is already open"):
        stream.open(1)
    stream.cancel(WAIT)


def test_cancel_stops_the_download_and_is_not_counted_as_its_failure() -> None:
    """The load failed on its own: a reader that reads nothing would block the download for good."""
    download = Download()
    stream = stream_of(download)
    stream.open(1)  # nobody reads: the download fills the pipe and waits
    stream.cancel(WAIT)
    assert download.cancelled.is_set(), "the download did not stop"
    assert download.sent < len(DATA)
    assert not stream.broken and stream.failure is None
