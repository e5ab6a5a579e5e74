"""Shared fixtures (keep this small: each test module owns its own)."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from connector.errors import BackendUnavailable
from connector.parse.backends import GpuBackend, select_backend

# What a PyFlink job on the local mini-cluster leaves in this process's environment: its Python functions run
# here (loopback), and the worker sets these. A PyFlink program or SQL runner a later test starts as a subprocess
# inherits them: PYFLINK_GATEWAY_DISABLED makes it refuse to start its gateway ("launching the
# PythonGatewayServer during Python UDF execution"), PYTHON_LOOPBACK_SERVER_ADDRESS sends its Python functions to
# this process's worker instead of a worker of its own, PYTHONPATH points at the finished job's files.
_LOOPBACK_WORKER_ENV = (
    "PYFLINK_GATEWAY_DISABLED",
    "PYTHON_LOOPBACK_SERVER_ADDRESS",
    "_PYFLINK_CONN_INFO_PATH",
    "_PYTHON_WORKER_MEMORY_LIMIT",
    "BOOT_LOG_DIR",
    "SEMI_PERSISTENT_DIRECTORY",
)
_PYTHONPATH = os.environ.get("PYTHONPATH")


@pytest.fixture(autouse=True)
def _no_loopback_worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without what an earlier test's local job left (`_LOOPBACK_WORKER_ENV`)."""
    for name in _LOOPBACK_WORKER_ENV:
        monkeypatch.delenv(name, raising=False)
    if _PYTHONPATH is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", _PYTHONPATH)


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


@dataclass(frozen=True)
class PrivateCA:
    """A CA made on the spot, a server certificate for 127.0.0.1 and a client certificate it signed (PEM)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca)
        return context


@pytest.fixture(scope="session")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> PrivateCA:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a CA")
    d: Path = tmp_path_factory.mktemp("ca")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=dspark test CA",
            "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=dspark test {name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.pem")  # fmt: skip
    return PrivateCA(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


def _gpu_skip_reason() -> str | None:
    try:
        select_backend("gpu")
    except BackendUnavailable as exc:
        return f"gpu backend unavailable here: {exc}"
    return None


@contextmanager
def _backend_for(param: str) -> Iterator[Any]:
    """What to pass to parse_batch as `backend` for a fixture param (see `backend`): a name, or for
    "gpu-emulated" a gpu backend object over `tests.libcudf_emulator` (result.backend is "gpu" either way)."""
    if param == "gpu":
        reason = _gpu_skip_reason()
        if reason:
            pytest.skip(reason)
    if not param.startswith("gpu-emulated"):
        yield param
        return
    from tests.libcudf_emulator import EmulatedLibcudfReader

    yield GpuBackend(EmulatedLibcudfReader(one_read=param != "gpu-emulated-two-reads"))


_GPU = pytest.param("gpu", marks=pytest.mark.gpu)


@pytest.fixture(params=["cpu", _GPU, "gpu-emulated"])
def backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Every deserializer test runs on each backend; gpu is skipped, with the reason, where it cannot run.

    "gpu-emulated" runs the gpu backend with libcudf replaced by `tests.libcudf_emulator` (everywhere).
    """
    with _backend_for(request.param) as name:
        yield name


@pytest.fixture(params=[_GPU, "gpu-emulated", "gpu-emulated-two-reads"])
def gpu_backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The gpu backend, real where it can run and emulated everywhere (in both of the GPU reader's ways)."""
    with _backend_for(request.param) as name:
        yield name


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Kafka broker (KRaft, deploy/kafka/start.sh) on a free 127.0.0.1 port for the whole run, stopped
    by its pid at the end. Skips, with the reason, where Java, the jars (Maven, the first time) or the Python
    client are missing; a broker that has what it needs and does not start fails the tests."""
    from tests.kafka_broker import Broker, Unavailable, maven_set

    if shutil.which("java") is None:
        pytest.skip("the kafka tests need Java 17 ('java' on PATH) for the broker")
    pytest.importorskip("confluent_kafka", reason="the kafka tests need confluent-kafka (the dev extra)")
    try:
        maven_set("kafka-broker")
    except Unavailable as exc:
        pytest.skip(f"no Kafka broker: {exc}")
    broker = Broker.start(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def flink_kafka_jars() -> list[Path]:
    """Flink's Kafka SQL connector and zstd-jni (deploy/maven/flink-kafka.pom.xml), for a job's classpath."""
    from tests.kafka_broker import Unavailable, flink_kafka_jars

    try:
        return flink_kafka_jars()
    except Unavailable as exc:
        pytest.skip(f"no Flink Kafka connector: {exc}")
