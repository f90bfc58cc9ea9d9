"""A file that may still be downloading while it loads: its readers, its header, and the wait for it.

A load given ``LoadRequest.stream`` reads the download as it arrives when the warehouse's bulk path
takes readers (``Dialect.stream_readers``). Right after that pass the load waits for the download to
be complete and checked (:meth:`IncomingFile.wait_for_download`), and only then reads the file itself
(rejects, fallbacks), checks the ledger by digest and commits. A download that broke or failed a
check raises there, and the load rolls back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from abm_provider.warehouse.records import awkward_bytes, parse_header, read_header

if TYPE_CHECKING:
    from abm_provider.warehouse.load import ByteSource, LoadRequest, StreamReader, Verified

_MB = 1024 * 1024


class IncomingFile:
    """The request's file for one load: read from its download's readers while it arrives, else from disk.

    Why one object: the readers must be let go on every path out of a load (or the download waits on
    them), and nothing may read ``request.path`` before the download is complete and checked. The
    request itself never changes: what the download turns out to be (its digest and size) is this
    object's, :attr:`sha256` and :attr:`size`.
    """

    def __init__(self, request: LoadRequest, readers_wanted: int, log: logging.Logger) -> None:
        self.request = request
        self.readers_wanted = readers_wanted
        self.log = log
        self._readers: list[StreamReader] = []
        #: The download still arriving; ``None`` once it is complete and checked (or for a plain file).
        self._stream: ByteSource | None = request.stream
        self._verified: Verified | None = None
        self._awkward: dict[tuple[tuple[bytes, str], ...], str | None] = {}

    @property
    def sha256(self) -> str:
        """The file's SHA-256: the request's, or the download's once complete ("" until then)."""
        return self._verified.sha256 if self._verified is not None else self.request.sha256

    @property
    def size(self) -> int:
        """The file's size in bytes: the request's, or the download's once complete (0 until then)."""
        return self._verified.size if self._verified is not None else self.request.size

    def arriving_readers(self) -> Sequence[StreamReader]:
        """The download's readers, opened once, while it still arrives; empty when it is a plain file."""
        if self._stream is None or self.readers_wanted == 0:
            return ()
        if not self._readers:
            self._readers = list(self._stream.open(self.readers_wanted))
        return self._readers

    def awkward_bytes(self, also: Mapping[bytes, str] | None = None) -> str | None:
        """:func:`~abm_provider.warehouse.records.awkward_bytes` of the complete file, read once per load
        and ``also``: a one-pass load that steps back to staging does not scan the file again."""
        key = tuple(sorted((also or {}).items()))
        if key not in self._awkward:
            self.wait_for_download()
            self._awkward[key] = awkward_bytes(self.request.path, also)
        return self._awkward[key]

    def header(self) -> list[str]:
        """The file's column names: from its first line as it arrives, or from the file."""
        readers = self.arriving_readers()
        if readers:
            first = readers[0].read_header()
            return parse_header([first.decode("utf-8", "surrogateescape")], self.request.path.name)
        self.wait_for_download()
        return read_header(self.request.path)

    def wait_for_download(self) -> None:
        """Wait until a streamed file is complete, checked and published; from then on it is a file.

        From then on :attr:`sha256` and :attr:`size` are the download's. Called once the bulk path has
        read the stream (or gave up on it), before anything else reads the path and before the commit:
        a broken download raises :class:`~abm_provider.exports.pipe.StreamBroken` here.
        """
        stream, self._stream = self._stream, None
        if stream is None:
            return
        self.let_go()
        started = time.monotonic()
        self._verified = verified = stream.settle()
        self.log.info(
            "The download of %s is complete and checked (%.1f MB, sha256 %s; waited %.1f s for it)",
            self.request.path.name,
            verified.size / _MB,
            verified.sha256[:12],
            time.monotonic() - started,
        )

    def let_go(self) -> None:
        """Detach the readers: the download never waits on them, and a thread blocked on one wakes up."""
        readers, self._readers = self._readers, []
        for reader in readers:
            reader.detach()
