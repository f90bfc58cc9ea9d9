"""An export's bytes handed to the warehouse as they arrive, while the archive file is written and checked.

:class:`ExportStream` runs one download (:meth:`abm_provider.exports.download.ExecutionDownload.run`) on a
thread of its own. Every chunk goes to the archive's temporary file and to one bounded
:class:`~abm_provider.exports.pipe.BytePipe` per reader the loader asked for (PostgreSQL: ``COPY`` and the
Arrow pre-scan; DuckDB: its reader), so memory stays at a few chunks whatever the file size and a slow
warehouse slows the download rather than filling memory. The readers see the end of the stream once
the last byte has arrived; :meth:`ExportStream.settle` then waits for the checks (length, ETag, hash)
and the archive's publication, and either returns what the ledger records or raises
:class:`~abm_provider.exports.pipe.StreamBroken`. The loader commits only after ``settle`` returned, so a
download that breaks, or fails a check after its last byte, leaves the table as it was.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from abm_provider.exports.pipe import BytePipe, StreamBroken

#: Chunks each pipe holds before the download waits for its reader.
PIPE_CHUNKS = 4
#: Bytes handed to the readers at a time: the download writes 256 KiB slices, and passing each one
#: through the pipes' locks and queues cost more CPU than the reading (4096 hand-overs a GiB per pipe).
TEE_CHUNK = 1 << 20


class StreamCancelled(Exception):
    """The load no longer wants the download (it failed on its own): the download stops."""


@dataclass(frozen=True)
class Settled:
    """A stream's download, complete, checked and published: what the load's ledger row records."""

    sha256: str
    size: int


class ExportStream:
    """One download feeding the loader's readers; see the module docstring.

    ``produce(tee, received)`` performs the download: it calls ``tee`` with every chunk and
    ``received`` once the last byte is in, and returns the summary of the published archive file.
    """

    def __init__(
        self,
        produce: Callable[[Callable[[bytes], None], Callable[[], None]], dict[str, Any]],
        *,
        log: logging.Logger | Any,
        name: str = "export",
    ) -> None:
        self._produce = produce
        self.log = log
        self.name = name
        self._pipes: list[BytePipe] = []
        self._thread: threading.Thread | None = None
        self._summary: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._cancelled = threading.Event()
        self._ended = False
        self._pending = bytearray()

    @property
    def read_as_it_arrived(self) -> bool:
        """Whether the loader read the bytes as they arrived (not only the finished file)."""
        return bool(self._pipes)

    @property
    def broken(self) -> bool:
        """Whether the download ended with an error of its own (not one the load's stop caused)."""
        return self.failure is not None

    @property
    def failure(self) -> BaseException | None:
        """The download's own error once it has ended (``None``: none, or only the load's stop)."""
        thread = self._thread
        if thread is None or thread.is_alive() or isinstance(self._error, StreamCancelled):
            return None
        return self._error

    def open(self, readers: int) -> list[BytePipe]:
        """Start the download with ``readers`` pipes, each receiving every byte from the first."""
        if self._thread is not None:
            raise RuntimeError(f"the stream of {self.name} is already open")
        self._pipes = [BytePipe(PIPE_CHUNKS, what="the load") for _ in range(max(readers, 0))]
        self._thread = threading.Thread(target=self._run, name="abm-export-stream", daemon=True)
        self._thread.start()
        return list(self._pipes)

    def settle(self) -> Settled:
        """Wait for the download to be complete, checked and published; raise :class:`StreamBroken` if not."""
        if self._thread is None:
            self.open(0)
        assert self._thread is not None
        for pipe in self._pipes:  # a reader that stopped early must not hold the download back
            pipe.detach()
        self._thread.join()
        if self._error is not None:
            raise StreamBroken(f"the download of {self.name} failed: {self._error}") from self._error
        assert self._summary is not None
        return Settled(str(self._summary["sha256"]), int(self._summary["bytes"]))

    def cancel(self, timeout: float = 60.0) -> None:
        """Stop the download (its temporary file is deleted); a no-op once it has ended."""
        if self._thread is None:
            return
        self._cancelled.set()
        for pipe in self._pipes:
            pipe.detach()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.log.warning("The download of %s did not stop within %.0f s", self.name, timeout)

    def _tee(self, data: bytes) -> None:
        """Take a slice of the download (a view the caller reuses once this returns: it is copied)."""
        if self._cancelled.is_set():
            raise StreamCancelled(f"the load of {self.name} stopped")
        if not self._pipes:
            return
        self._pending += data
        if len(self._pending) >= TEE_CHUNK:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._pending:
            chunk = bytes(self._pending)
            self._pending.clear()
            for pipe in self._pipes:
                pipe.put(chunk)

    def _received(self) -> None:
        """The last byte is in: the readers see the end now, while the checks and the rename run."""
        self._ended = True
        self._hand_over()
        for pipe in self._pipes:
            pipe.finish()

    def _run(self) -> None:
        try:
            self._summary = self._produce(self._tee, self._received)
        except BaseException as exc:  # reported by settle; the readers get StreamBroken
            self._error = exc
            for pipe in self._pipes:
                pipe.fail(exc)
        else:
            if not self._ended:
                self._received()
