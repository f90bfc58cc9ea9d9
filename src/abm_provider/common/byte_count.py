"""The one rule for a download's byte count: what was received is what was expected.

A download's size is known four times over: the server announces it (``Content-Length``, or the
total of a ``Content-Range``), the hook counts what it read, the archive's sink counts what it
wrote, and the stored file and its manifest hold a size. Each pair is compared at a different step
(the hook while the body arrives, the archive before it publishes, a re-run before it trusts an
earlier file), and every one of those comparisons is this function, so that the rule and its
message are the same wherever a count is off.
"""

from __future__ import annotations

__all__ = ["ByteCountMismatch", "check_byte_count"]


class ByteCountMismatch(ValueError):
    """A download's byte count is not the one expected; the message names both counts and the download.

    :param what: the download, by its execution where known (``"Download of execution 42"``).
    :param received: the bytes that arrived (or were stored).
    :param expected: the bytes there should be.
    :param basis: who said so, completing "but ... <expected>" (``"Content-Length announced"``).
    """

    def __init__(self, what: str, received: int, expected: int, basis: str) -> None:
        super().__init__(f"{what} received {received} bytes but {basis} {expected}")
        self.what = what
        self.received = received
        self.expected = expected
        self.basis = basis

    @property
    def short(self) -> bool:
        """Fewer bytes than expected: the body was cut off (a download may resume), not over-long."""
        return self.received < self.expected


def check_byte_count(
    received: int, expected: int | None, *, what: str, basis: str, complete: bool = True
) -> None:
    """Raise :class:`ByteCountMismatch` unless ``received`` is ``expected``.

    ``expected=None`` means nobody announced a size: there is nothing to compare. ``complete=False``
    is for a body still arriving, where fewer bytes are not (yet) wrong and only more are.
    """
    if expected is None or received == expected or (not complete and received < expected):
        return
    raise ByteCountMismatch(what, received, expected, basis)
