"""Shared fixtures (keep this small: each test module owns its own)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tls_server_context(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server-side TLS context with a self-signed certificate for 127.0.0.1 (no client trusts it)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a self-signed certificate")
    folder: Path = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
