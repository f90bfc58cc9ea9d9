"""TLS: verification is on by default and a private CA bundle can be named in the connection extra.

The emulator speaks plain http on loopback, so this uses a small local https server with a
certificate from a throw-away CA made here.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from abm_provider.exceptions import AbmApiError
from abm_provider.hooks.abm import AbmAsyncHook, AbmHook


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "abm test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


class _Folders(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = json.dumps({"folders": [{"uuid": "u1", "name": "over tls"}], "nextPageToken": ""}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    ca, cert, key = _certificates(tmp_path_factory.mktemp("tls"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Folders)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", ca
    server.shutdown()
    server.server_close()


def _connect(monkeypatch: pytest.MonkeyPatch, base_url: str, **extra: Any) -> None:
    conn = {"conn_type": "abm", "host": base_url, "password": "tls-key-123", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_ABM_TLS", json.dumps(conn))


def test_unknown_ca_is_refused_by_default_with_a_hint(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _connect(monkeypatch, https_server[0])
    with pytest.raises(AbmApiError) as info:
        list(AbmHook("abm_tls", max_attempts=1).iter_folders())
    assert "TLS failed" in str(info.value) and '"ca_bundle"' in str(info.value)
    assert "certificate verify failed" in str(info.value)
    ok, message = AbmHook("abm_tls").test_connection()
    assert not ok and "TLS failed" in message


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_ca_bundle_from_the_extra_is_trusted(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The form's two fields: the verify checkbox (on) and the CA bundle path.
    _connect(monkeypatch, https_server[0], verify=True, ca_bundle=str(https_server[1]))
    assert [f["name"] for f in AbmHook("abm_tls").iter_folders()] == ["over tls"]
    # A connection made before the form had ca_bundle keeps the path in verify.
    _connect(monkeypatch, https_server[0], verify=str(https_server[1]))
    assert [f["name"] for f in AbmHook("abm_tls").iter_folders()] == ["over tls"]
    _connect(monkeypatch, https_server[0], verify="false")
    assert [f["name"] for f in AbmHook("abm_tls").iter_folders()] == ["over tls"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"verify": False, "ca_bundle": "/etc/ca.pem"}, "sets ca_bundle '/etc/ca.pem' with verify off"),
        (
            {"verify": "/a.pem", "ca_bundle": "/b.pem"},
            "two CA bundles, verify '/a.pem' and ca_bundle '/b.pem'",
        ),
        ({"ca_bundle": 5}, "ca_bundle must be the path of a CA bundle file, got 5"),
    ],
)
def test_contradicting_tls_settings_name_the_connection_and_both_fields(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], message: str
) -> None:
    _connect(monkeypatch, https_server[0], **extra)
    with pytest.raises(ValueError, match="connection 'abm_tls'") as info:
        AbmHook("abm_tls").settings
    assert message in str(info.value)


async def test_async_hook_uses_the_same_tls_settings(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _connect(monkeypatch, https_server[0], max_attempts=1)
    async with AbmAsyncHook("abm_tls") as hook:
        with pytest.raises(AbmApiError, match="TLS failed"):
            [f async for f in hook.iter_folders()]
    _connect(monkeypatch, https_server[0], verify=str(https_server[1]))
    async with AbmAsyncHook("abm_tls") as hook:
        assert [f["name"] async for f in hook.iter_folders()] == ["over tls"]
    _connect(monkeypatch, https_server[0], verify=False)
    async with AbmAsyncHook("abm_tls") as hook:
        assert [f["name"] async for f in hook.iter_folders()] == ["over tls"]
