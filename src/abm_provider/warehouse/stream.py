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
from collections.abc import Sequence
from typing import TYPE_CHECKING

from abm_provider.warehouse.records import parse_header, read_header

if TYPE_CHECKING:
    from abm_provider.warehouse.load import LoadRequest, StreamReader

_MB = 1024 * 1024


class IncomingFile:
    """The request's file for one load: read from its download's readers while it arrives, else from disk.

    Why one object: the readers must be let go on every path out of a load (or the download waits on
    them), and nothing may read ``request.path`` before the download is complete and checked.
    """

    def __init__(self, request: LoadRequest, readers_wanted: int, log: logging.Logger) -> None:
        self.request = request
        self.readers_wanted = readers_wanted
        self.log = log
        self._readers: list[StreamReader] = []

    def arriving_readers(self) -> Sequence[StreamReader]:
        """The download's readers, opened once, while it still arrives; empty when it is a plain file."""
        if self.request.stream is None or self.readers_wanted == 0:
            return ()
        if not self._readers:
            self._readers = list(self.request.stream.open(self.readers_wanted))
        return self._readers

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

        Fills in the request's ``sha256`` and ``size`` and drops its stream. Called once the bulk path
        has read the stream (or gave up on it), before anything else reads the path and before the
        commit: a broken download raises :class:`~abm_provider.exports.pipe.StreamBroken` here.
        """
        request = self.request
        stream, request.stream = request.stream, None
        if stream is None:
            return
        self.let_go()
        started = time.monotonic()
        verified = stream.settle()
        request.sha256, request.size = verified.sha256, verified.size
        self.log.info(
            "The download of %s is complete and checked (%.1f MB, sha256 %s; waited %.1f s for it)",
            request.path.name,
            request.size / _MB,
            request.sha256[:12],
            time.monotonic() - started,
        )

    def let_go(self) -> None:
        """Detach the readers: the download never waits on them, and a thread blocked on one wakes up."""
        readers, self._readers = self._readers, []
        for reader in readers:
            reader.detach()
