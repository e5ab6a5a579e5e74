"""The HTTP layer that discovery (`dspark-vllm columns`) reads an endpoint with (aiohttp), against real servers
on 127.0.0.1: its errors mapped to one family, interim responses, bodies beyond the limit (memory read from
the process itself), TLS with a private CA. The request step of Flink jobs is the JVM's (RequesterTests)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import aiohttp.client_exceptions
import pytest

from connector.errors import ClientError, OptionsError
from connector.server import ClientConfig, open_transport
from connector.server.discovery import discover_schema
from connector.server.transport import EXCEPTION_MAP
from connector.simulator.responses import BodyOptions, make_body, request_rng, to_bytes
from connector.simulator.server import system_fingerprint
from connector.simulator.testing import serve_simulator
from tests.conftest import PrivateCA

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def chat(text: str = "hi") -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}]}


Answer = tuple[int, bytes] | ClientError  # what one exchange ends with: the status and body, or why not


async def _exchange(transport, payload: dict[str, object] | None) -> Answer:  # type: ignore[no-untyped-def]
    method, path = ("GET", "/v1/models") if payload is None else ("POST", "/v1/chat/completions")
    content = None if payload is None else json.dumps(payload).encode()
    try:
        async with transport.request(method, path, content=content) as response:
            return response.status, await response.read()
    except ClientError as exc:
        return exc


def exchange(url: str, payloads: list[dict[str, object] | None], **options: object) -> list[Answer]:
    """Each payload POSTed (None: a GET) in turn over one transport made from `options` (ClientConfig's)."""

    async def go() -> list[Answer]:
        transport = open_transport(ClientConfig(url, **options))  # type: ignore[arg-type]
        try:
            return [await _exchange(transport, p) for p in payloads]
        finally:
            await transport.aclose()

    return asyncio.run(go())


# --- one exception family ---


def test_every_aiohttp_exception_is_mapped() -> None:
    # WSMessageTypeError is a TypeError of WebSocket messages: no WebSocket is ever opened.
    exported = {
        getattr(aiohttp.client_exceptions, name)
        for name in aiohttp.client_exceptions.__all__
        if name != "WSMessageTypeError"
    }
    exceptions = {cls for cls in exported if isinstance(cls, type) and issubclass(cls, BaseException)}
    unmapped = sorted(cls.__name__ for cls in exceptions - set(EXCEPTION_MAP))
    assert unmapped == [], f"map these aiohttp exceptions in connector/server/transport.py: {unmapped}"
    assert all(issubclass(ours, ClientError) for ours, _ in EXCEPTION_MAP.values())


# What a broken or malicious server may answer, and the kind and message of the error (a redirect: its status).
MALICIOUS = {
    "not-http": (b"SMTP ready\r\n\r\n", "protocol", "not a valid HTTP/1.1 response: Bad status line: .+"),
    "bad-header": (b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "protocol", "not a valid HTTP/1.1 response: .+"),
    "huge-header": (
        b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 70_000 + b"\r\ncontent-length: 2\r\n\r\n{}",
        "protocol",
        "not a valid HTTP/1.1 response: Got more than 16384 bytes when reading: .+",
    ),
    "short-body": (  # (before: "... not completed: <ContentLengthError: 400, message='Not enough ...'>")
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
        "stream",
        r"the response body broke off: Response payload is not completed: Not enough data to satisfy content "
        r"length header \(received 5 of 10 bytes\)\.",
    ),
    "bad-chunk": (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        "protocol",
        "not a valid HTTP/1.1 response: Invalid character in chunk size: .+",
    ),
    "nothing": (b"", "stream", "the server closed the connection: Server disconnected"),
    "redirect": (
        b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://elsewhere:8000/\r\ncontent-length: 0\r\n\r\n",
        "status",
        "307",  # handed back, not followed
    ),
    "bad-gzip": (  # the same every time: not retried (before: a retryable "stream" error, "400, message: ...")
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 5\r\n\r\nabcde",
        "protocol",
        "the body does not decode as its content-encoding says: Can not decode content-encoding: gzip",
    ),
}


@pytest.mark.parametrize("answer", sorted(MALICIOUS))
def test_a_broken_answer_is_an_error_of_its_kind(answer: str) -> None:
    raw, kind, message = MALICIOUS[answer]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw)
        await writer.drain()
        writer.close()

    async def go() -> Answer:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = open_transport(ClientConfig(f"http://127.0.0.1:{port}"))
        try:
            return await _exchange(transport, chat())
        finally:
            await transport.aclose()
            server.close()

    got = asyncio.run(go())
    if kind == "status":
        assert got == (int(message), b"")
    else:
        assert isinstance(got, ClientError) and got.kind == kind, got
        assert re.fullmatch(f"{kind}: {message}", str(got)), str(got)


# --- interim responses ---


def test_an_interim_response_is_never_taken_for_the_answer() -> None:
    # Before (the hand-written HTTP/1.1 engine): a 103 was returned as the response, with an empty body, and
    # the connection went back to the pool with the real answer unread: the next request got that answer.
    payloads = [chat(f"q{i}") for i in range(4)]
    with serve_simulator(seed=2, faults={"interim": 1.0}, created=1) as sim:
        answers = exchange(sim.url, payloads)
        stats = sim.stats()
    options = BodyOptions(created=1, system_fingerprint=system_fingerprint("0.32.0", 2))
    for payload, answer in zip(payloads, answers, strict=True):
        served = {**payload, "model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 4096}
        assert answer == (200, to_bytes(make_body(request_rng(2, payload), "openai", served, options)))
    assert (stats["fault interim"], stats["connections_total"]) == (4, 1)


# --- bodies beyond the limit ---


def test_a_body_beyond_the_limit_is_too_large_and_its_connection_closed() -> None:
    async def go(url: str) -> tuple[Answer, Answer]:
        transport = open_transport(ClientConfig(url, max_body_bytes=MIB))
        try:
            flood = await _exchange(transport, chat())
            # The server sees the client hang up while the client is still open (waited for, not timed).
            deadline = time.monotonic() + 60
            while sim.stats().get("flood_aborted") != 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            sim.simulator.reconfigure(faults={})  # type: ignore[union-attr]
            after = await _exchange(transport, chat())
            return flood, after
        finally:
            await transport.aclose()

    with serve_simulator(faults={"flood": 1.0}, flood_bytes=64 * MIB) as sim:
        flood, after = asyncio.run(go(sim.url))
        stats = sim.stats()
    assert isinstance(flood, ClientError) and flood.kind == "too-large"
    assert str(flood) == "too-large: the body passed the limit of 1,048,576 bytes; the rest was not read"
    assert stats["flood_aborted"] == 1
    assert not isinstance(after, ClientError) and after[0] == 200
    assert stats["connections_total"] == 2  # the too-large body cost its connection


def test_an_announced_length_beyond_the_limit_is_refused_before_reading() -> None:
    with serve_simulator(faults={"big": 1.0}, big_bytes=2 * MIB) as sim:
        (got,) = exchange(sim.url, [chat()], max_body_bytes=MIB)
    assert isinstance(got, ClientError) and got.kind == "too-large"
    assert re.fullmatch(
        r"too-large: the server announced 2,\d{3},\d{3} bytes, more than the limit of 1,048,576", str(got)
    )


_FLOOD_CLIENT = """
import asyncio, json, sys
from connector.server import ClientConfig, open_transport
from connector.errors import ClientError

def peak_rss_bytes():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

async def main(url):
    transport = open_transport(ClientConfig(url, max_body_bytes=16 * 1024 * 1024, timeout_s=600))
    before = peak_rss_bytes()
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    try:
        async with transport.request("POST", "/v1/chat/completions", content=body) as response:
            await response.read()
        kind = None
    except ClientError as exc:
        kind = exc.kind
    finally:
        await transport.aclose()
    print(json.dumps({"kind": kind, "grew": peak_rss_bytes() - before}))

asyncio.run(main(sys.argv[1]))
"""


def test_a_2_gib_body_never_takes_more_memory_than_about_the_limit() -> None:
    # Before: the asyncio engine read the whole body (4.2 GB RSS), httpx read until its timeout (2.0 GB).
    # The client runs in its own process so that its peak resident memory (VmHWM) is its own.
    with serve_simulator(faults={"flood": 1.0}, flood_bytes=2 * 1024 * MIB) as sim:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_FLOOD_CLIENT), sim.url],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
            check=False,
        )
        deadline = time.monotonic() + 60  # the server notices the hang-up at its next write
        while sim.stats().get("flood_aborted") != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = sim.stats()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["kind"] == "too-large", result
    assert result["grew"] < 3 * 16 * MIB, result  # the limit, plus the join of its pieces, plus buffers
    assert stats["flood_aborted"] == 1


# --- TLS ---


def test_a_private_ca_is_trusted_only_when_given(private_ca: PrivateCA, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Nothing is read from the environment: SSL_CERT_FILE naming the CA changes nothing.
    monkeypatch.setenv("SSL_CERT_FILE", str(private_ca.ca))
    with serve_simulator(ssl_context=private_ca.server_context()) as sim:
        (refused,) = exchange(sim.url, [None])
        (trusted,) = exchange(sim.url, [None], ca_bundle=str(private_ca.ca))
        (unchecked,) = exchange(sim.url, [None], verify=False)
        found = discover_schema(sim.url, ca_bundle=str(private_ca.ca))
    assert isinstance(refused, ClientError) and refused.kind == "tls"
    assert re.fullmatch(r"tls: the server's certificate does not verify: 127\.0\.0\.1:\d+: .+", str(refused))
    assert not isinstance(trusted, ClientError) and trusted[0] == 200
    assert not isinstance(unchecked, ClientError) and unchecked[0] == 200
    assert found.source == "json-schema"


def test_a_client_certificate_is_presented_when_given(private_ca: PrivateCA) -> None:
    ca = str(private_ca.ca)
    with serve_simulator(ssl_context=private_ca.server_context(require_client_cert=True)) as sim:
        (without,) = exchange(sim.url, [None], ca_bundle=ca)
        (with_cert,) = exchange(
            sim.url,
            [None],
            ca_bundle=ca,
            client_cert=str(private_ca.client_cert),
            client_key=str(private_ca.client_key),
        )
    assert isinstance(without, ClientError)
    assert without.kind in ("tls", "stream")  # TLS 1.3 reports the refusal after the handshake
    assert not isinstance(with_cert, ClientError) and with_cert[0] == 200


def test_unreadable_tls_files_are_option_errors(tmp_path: Path, private_ca: PrivateCA) -> None:
    with pytest.raises(OptionsError, match=r"cannot load the CA bundle '.*nope\.pem': .*Give a readable PEM file"):
        open_transport(ClientConfig("https://127.0.0.1:1", ca_bundle=str(tmp_path / "nope.pem")))
    not_pem = tmp_path / "cert.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(OptionsError, match=r"cannot load the client certificate '.*cert\.pem'"):
        open_transport(ClientConfig("https://127.0.0.1:1", client_cert=str(not_pem)))
