"""Shared fixtures (keep this small: each test module owns its own)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from connector.decode.readers import select_reader
from connector.errors import BackendUnavailable


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


def _gpu_skip_reason() -> str | None:
    try:
        select_reader("gpu")
    except BackendUnavailable as exc:
        return f"gpu backend unavailable here: {exc}"
    return None


@contextmanager
def _backend_for(param: str) -> Iterator[str]:
    """The backend name to pass to parse_batch for a fixture param (see `backend`)."""
    if param == "gpu":
        reason = _gpu_skip_reason()
        if reason:
            pytest.skip(reason)
    if not param.startswith("gpu-emulated"):
        yield param
        return
    from connector.decode import readers
    from tests.libcudf_emulator import EmulatedLibcudfReader

    saved = readers._chosen.get("gpu")
    readers._chosen["gpu"] = (EmulatedLibcudfReader(one_read=param != "gpu-emulated-two-reads"), None)
    try:
        yield "gpu"
    finally:
        if saved is None:
            readers._chosen.pop("gpu", None)
        else:
            readers._chosen["gpu"] = saved


_GPU = pytest.param("gpu", marks=pytest.mark.gpu)


@pytest.fixture(params=["cpu", _GPU, "gpu-emulated"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every deserializer test runs on each backend; gpu is skipped, with the reason, where it cannot run.

    "gpu-emulated" runs the gpu backend with libcudf replaced by `tests.libcudf_emulator` (everywhere).
    """
    with _backend_for(request.param) as name:
        yield name


@pytest.fixture(params=[_GPU, "gpu-emulated", "gpu-emulated-two-reads"])
def gpu_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The gpu backend, real where it can run and emulated everywhere (in both of the GPU reader's ways)."""
    with _backend_for(request.param) as name:
        yield name
