"""A bounded in-memory pipe between the download thread and a reader thread, and how it breaks."""

from __future__ import annotations

import contextlib
import io
import queue
from collections.abc import Callable, Iterator
from typing import Any, cast


class StreamBroken(Exception):
    """The download feeding a :class:`BytePipe` failed: the bytes read so far are not the whole file.

    Raised to the pipe's reader (a loader reading the export while it downloads), which rolls back;
    ``__cause__`` is the download's own error.
    """


class ReaderDetached(StreamBroken):
    """The pipe's reader was let go (:meth:`BytePipe.detach`) while it waited for bytes.

    Raised to a read blocked on an empty pipe, or made after the detach, so that no thread (an Arrow
    read-ahead thread of the pre-scan, above all, which the interpreter waits for at exit) sleeps for
    ever on a pipe no writer will fill again.
    """


#: Queued by :meth:`BytePipe.detach` to wake a reader blocked on the empty queue.
_WAKE = object()


class BytePipe(io.RawIOBase):
    """A bounded in-memory pipe: the download thread writes chunks, a consumer thread reads them.

    At most ``max_chunks`` chunks wait in the queue, so a slow consumer slows the download instead of
    filling memory; if the consumer dies, the writer is told instead of blocking forever. A consumer
    that no longer needs the bytes calls :meth:`detach`, after which they are dropped (the download
    goes on into its file at full speed); a failed download calls :meth:`fail`, and the reader gets
    :class:`StreamBroken` once it has read what arrived before the failure.
    """

    def __init__(self, max_chunks: int = 2, *, what: str = "the consumer") -> None:
        super().__init__()
        self._queue: queue.Queue[bytes | BaseException | object | None] = queue.Queue(maxsize=max_chunks)
        self._buffer = b""
        self._offset = 0
        self._eof = False
        self._detached = False
        self._what = what
        self.reader_error: BaseException | None = None

    def readable(self) -> bool:
        return True

    def _enqueue(self, item: bytes | BaseException | None, given_up: Callable[[], bool]) -> None:
        """Queue ``item``, waiting in short slices while the queue is full, so that the reader going
        away (``given_up()``) is noticed instead of blocking forever."""
        while not given_up():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _reader_gone(self) -> bool:
        """Detached: drop the chunk. Failed: tell the writer."""
        if self._detached:
            return True
        if self.reader_error is not None:
            raise RuntimeError(f"{self._what} failed: {self.reader_error}") from self.reader_error
        return False

    def put(self, data: bytes | BaseException | None) -> None:
        """Queue a chunk (blocking while the queue is full); raise if the reader has failed."""
        self._enqueue(data, self._reader_gone)

    def finish(self) -> None:
        """Mark the end of the stream."""
        self.put(None)

    def fail(self, error: BaseException) -> None:
        """End the stream with the producer's error; never raises, nor blocks once the reader is gone."""
        with contextlib.suppress(Exception):
            self._enqueue(error, lambda: self._detached or self.reader_error is not None)

    def detach(self) -> None:
        """The reader is done: drop every later chunk, release a writer blocked on a full queue, and
        wake a read blocked on an empty one (it raises :class:`ReaderDetached`)."""
        self._detached = True
        while True:  # a writer already inside ``put`` may slip one chunk in after the drain
            self.drain()
            try:
                self._queue.put_nowait(_WAKE)
                return
            except queue.Full:
                continue

    def _fill(self) -> bool:
        while self._offset >= len(self._buffer) and not self._eof:
            if self._detached:
                raise ReaderDetached(f"the reader of {self._what} was let go before the end of the stream")
            item = self._queue.get()
            if item is _WAKE:
                continue
            if item is None:
                self._eof = True
            elif isinstance(item, BaseException):
                self._eof = True
                raise StreamBroken(f"the download broke: {item}") from item
            else:
                self._buffer, self._offset = cast(bytes, item), 0
        return self._offset < len(self._buffer)

    def read(self, size: int | None = -1) -> bytes:
        if not self._fill():
            return b""
        if size is None or size < 0:
            size = len(self._buffer) - self._offset
        out = self._buffer[self._offset : self._offset + size]
        self._offset += len(out)
        return out

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def chunks(self) -> Iterator[bytes]:
        """What remains, chunk by chunk as it arrives (no copy when nothing was read partly)."""
        while self._fill():
            chunk = self._buffer[self._offset :] if self._offset else self._buffer
            self._offset = len(self._buffer)
            yield chunk

    def read_header(self, limit: int = 1 << 20) -> bytes:
        """Read up to and including the first newline (the CSV header), then push it back."""
        collected = bytearray()
        while b"\n" not in collected and len(collected) < limit:
            chunk = self.read(limit - len(collected))
            if not chunk:
                break
            collected.extend(chunk)
        end = collected.find(b"\n") + 1 or len(collected)
        header, rest = bytes(collected[:end]), bytes(collected[end:])
        # Push everything back: the reader reads the header itself.
        self._buffer = header + rest + self._buffer[self._offset :]
        self._offset = 0
        return header

    def drain(self) -> None:
        """Empty the queue so a writer blocked on a full queue can notice the failure."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
