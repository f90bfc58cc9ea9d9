"""``check_byte_count``: the one rule for a download's size, and an error that names both counts."""

from __future__ import annotations

import pytest

from abm_provider.common.byte_count import ByteCountMismatch, check_byte_count


def test_the_expected_count_passes_and_an_unknown_one_is_not_checked() -> None:
    check_byte_count(10, 10, what="Download of execution 42", basis="Content-Length announced")
    check_byte_count(10, None, what="Download of execution 42", basis="Content-Length announced")


@pytest.mark.parametrize(("received", "short"), [(9, True), (11, False)])
def test_a_wrong_count_names_the_download_both_counts_and_who_announced_it(
    received: int, short: bool
) -> None:
    with pytest.raises(ByteCountMismatch) as raised:
        check_byte_count(received, 10, what="Download of execution 42", basis="Content-Length announced")
    err = raised.value
    assert str(err) == f"Download of execution 42 received {received} bytes but Content-Length announced 10"
    assert (err.received, err.expected, err.short) == (received, 10, short)
    assert isinstance(err, ValueError), "callers that turn a ValueError into a task failure keep working"


def test_a_body_still_arriving_may_be_short_but_never_long() -> None:
    check_byte_count(4, 10, what="the download", basis="the server announced", complete=False)
    check_byte_count(10, 10, what="the download", basis="the server announced", complete=False)
    with pytest.raises(ByteCountMismatch, match="received 11 bytes but the server announced 10"):
        check_byte_count(11, 10, what="the download", basis="the server announced", complete=False)
