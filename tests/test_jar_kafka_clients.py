"""kafka-clients in the connector jar (the Kafka response store): fetched pinned from a Maven repository
into the build cache by the same function as RE2's tarball (native/build_native.py `fetch_pinned`), its classes
bundled into the jar; a repository out of reach is one line naming the file to put where."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.java import build_jar

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "java" / "build_jar.py"


def _fetch(tmp_path: Path, repository: str) -> subprocess.CompletedProcess[str]:
    """java/build_jar.py --kafka-clients-jar with an empty cache in tmp_path and `repository` as Maven's."""
    (tmp_path / "out").mkdir(exist_ok=True)
    env = dict(os.environ, DSPARK_VLLM_CACHE=str(tmp_path / "cache"), DSPARK_VLLM_MAVEN_REPOSITORY=repository)
    command = [sys.executable, str(SCRIPT), "--kafka-clients-jar", str(tmp_path / "out")]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def repository() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A Maven repository on 127.0.0.1: yields (url, {path: bytes served})."""
    served: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = served.get(self.path.lstrip("/"), b"")
            self.send_response(200 if self.path.lstrip("/") in served else 404)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_kafka_clients_that_cannot_be_fetched_is_one_line(tmp_path: Path, repository) -> None:
    script = build_jar()
    url, served = repository
    served[script.KAFKA_CLIENTS] = b"not the jar"
    done = _fetch(tmp_path, url)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"dspark-vllm: kafka-clients 4.4.0 could not be fetched from {url}/{script.KAFKA_CLIENTS} (")
    assert line.endswith(
        f"not the pinned {script.KAFKA_CLIENTS_SHA256}); put that file (sha256 {script.KAFKA_CLIENTS_SHA256}) into "
        f"{tmp_path / 'cache'} or set DSPARK_VLLM_CACHE to a folder that has it"
    )
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-fetched left


def test_kafka_clients_is_fetched_once_then_taken_from_the_cache(tmp_path: Path, repository) -> None:
    script = build_jar()
    try:
        jar = script.kafka_clients_jar()  # the one this checkout's build fetched
    except SystemExit as exc:
        pytest.skip(f"the kafka-clients jar is not at hand: {exc}")
    url, served = repository
    served[script.KAFKA_CLIENTS] = jar.read_bytes()
    done = _fetch(tmp_path, url)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / jar.name).read_bytes() == jar.read_bytes()
    served.clear()  # the repository gone: the cache is enough (an image build without a network)
    (tmp_path / "out" / jar.name).unlink()
    assert _fetch(tmp_path, url).returncode == 0
    assert (tmp_path / "out" / jar.name).is_file()


def test_the_connector_jar_carries_kafka_clients() -> None:
    jars = sorted((ROOT / "connector" / "flink" / "jars").glob("dspark-vllm-flink-*.jar"))
    if not jars:
        pytest.skip("the connector jar is not built (pip install -e . builds it)")
    names = set(zipfile.ZipFile(jars[0]).namelist())
    assert "io/dspark/vllm/store/KafkaStore.class" in names
    assert "org/apache/kafka/clients/producer/KafkaProducer.class" in names
    assert "META-INF/LICENSE-kafka-clients" in names and "META-INF/NOTICE-kafka-clients" in names
