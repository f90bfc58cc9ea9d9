"""``abm_provider.common.urls``: the rules every URL the provider builds or follows passes, and redaction.

A base URL is normalised or refused naming the connection; a path segment cannot change the path; a
query is encoded once; a download link is https, or plain http to loopback only, with a host; a signed
link is shown without its signature.
"""

from __future__ import annotations

import pytest

from abm_provider.common.urls import (
    UnsafeUrlError,
    check_url,
    encode_query,
    normalise_base_url,
    path_segment,
    safe_url,
)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (None, "https://api.terminusplatform.com"),
        ("", "https://api.terminusplatform.com"),
        ("api.example.com", "https://api.example.com"),
        ("https://api.example.com/", "https://api.example.com"),
        ("https://gw.example.com/abm/", "https://gw.example.com/abm"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.5.6.7:1", "http://127.5.6.7:1"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("http://localhost:9000", "http://localhost:9000"),
    ],
)
def test_base_url(host: str | None, expected: str) -> None:
    assert normalise_base_url(host) == expected


def test_port_field_is_appended() -> None:
    assert normalise_base_url("api.example.com", 8443) == "https://api.example.com:8443"
    # The form's port field, the URL's own port, or both when they agree; the UI sends 0 for "none".
    assert normalise_base_url("http://127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert normalise_base_url("http://127.0.0.1:8080", 8080) == "http://127.0.0.1:8080"
    assert normalise_base_url("http://127.0.0.1:8080", 0) == "http://127.0.0.1:8080"


def test_a_port_field_that_contradicts_the_url_is_refused() -> None:
    with pytest.raises(ValueError, match="has port 8080 but the port field says 9090") as info:
        normalise_base_url("http://127.0.0.1:8080", 9090, where="connection 'abm_default'")
    assert "connection 'abm_default'" in str(info.value)


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("http://api.example.com", "plain http://"),
        ("http://10.0.0.1", "plain http://"),
        ("ftp://api.example.com", "scheme 'ftp'; only https"),
        ("https://user:pw@api.example.com", "user name or password"),
        ("https://api.example.com/?x=1", "query"),
    ],
)
def test_unsafe_base_urls_are_refused(host: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as info:
        normalise_base_url(host, where="connection 'abm_default'")
    assert "connection 'abm_default'" in str(info.value)


@pytest.mark.parametrize("bad", ["a/b", "..", ".", "a b", "x\ty", "id\n", "a\\b", ""])
def test_path_segment_refuses_what_could_change_the_path(bad: str) -> None:
    with pytest.raises(ValueError, match="list_id"):
        path_segment(bad, "list_id")


def test_path_segment_encodes_the_rest() -> None:
    assert path_segment("TACTIC_PERFORMANCE", "export_type") == "TACTIC_PERFORMANCE"
    assert path_segment("a?b#c%d", "list_id") == "a%3Fb%23c%25d"
    with pytest.raises(ValueError, match="list_id must be a string"):
        path_segment(5, "list_id")


def test_query_encoding() -> None:
    query = encode_query(
        {"orderBy": "updateTime asc", "filter": "status=COMPLETE", "folderIds": ["a", "b"], "pageToken": None}
    )
    assert query == "orderBy=updateTime%20asc&filter=status%3DCOMPLETE&folderIds=a&folderIds=b"


def test_safe_url_drops_the_signature() -> None:
    url = "https://bucket.s3.amazonaws.com/exports/x.csv?X-Amz-Signature=abc&X-Amz-Credential=def"
    shown = safe_url(url)
    assert shown == "https://bucket.s3.amazonaws.com/exports/x.csv?<redacted>"
    assert "abc" not in shown and "def" not in shown


@pytest.mark.parametrize(
    "uri",
    [
        "https://bucket.s3.amazonaws.com/exports/x.csv?X-Amz-Signature=abc",
        "http://127.0.0.1:8081/objects/x.csv?sig=1",
        "http://localhost:9000/x.csv",
        "http://[::1]:9000/x.csv",
    ],
)
def test_allowed_links(uri: str) -> None:
    assert check_url(uri, "downloadUri") == uri


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("file:///etc/passwd", "scheme 'file'; only https is allowed"),
        ("/etc/passwd", r"scheme '\(none\)'; only https is allowed"),
        ("./export.csv", r"scheme '\(none\)'; only https is allowed"),
        ("http://storage.example.com/x.csv", "plain http"),
        ("http://10.0.0.5/x.csv", "plain http"),
        ("ftp://example.com/x.csv", "scheme 'ftp'; only https is allowed"),
        ("s3://bucket/x.csv", "scheme 's3'; only https is allowed"),
        ("https:///x.csv", "has no host"),
        ("", "non-empty URL"),
    ],
)
def test_refused_links(uri: str, fragment: str) -> None:
    with pytest.raises(UnsafeUrlError, match=fragment):
        check_url(uri, "downloadUri")


def test_redacted_link_hides_signature() -> None:
    assert safe_url("https://h/p/x.csv?X-Amz-Signature=secret") == "https://h/p/x.csv?<redacted>"
