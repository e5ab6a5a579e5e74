"""The client's own HTTP/1.1 engine against canned server answers (real sockets on 127.0.0.1)."""

from __future__ import annotations

import asyncio

import pytest

from connector.client.fasthttp import FastPool, ReadError, RemoteProtocolError


async def _serve(answers: list[bytes], seen: list[bytes]) -> tuple[asyncio.Server, str]:
    """A server that reads one request head + body per answer and writes the next canned answer;
    an answer ending in b"<close>" is sent without it and the connection is then closed."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while answers:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            seen.append(head + await reader.readexactly(length))
            answer = answers.pop(0)
            close = answer.endswith(b"<close>")
            writer.write(answer.removesuffix(b"<close>"))
            await writer.drain()
            if close:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def _run(answers: list[bytes], posts: int, prefix: str = "", stream: bool = False):  # type: ignore[no-untyped-def]
    seen: list[bytes] = []

    async def go():  # type: ignore[no-untyped-def]
        server, url = await _serve(list(answers), seen)
        pool = FastPool(url + prefix, max_idle=4, ssl_context=None, connect_timeout_s=5, headers={"a": "1"})
        out = []
        try:
            for i in range(posts):
                response = await pool.post("/v1/x", b'{"i":%d}' % i, {"x-request-id": str(i)}, stream=stream)
                body = b"".join([c async for c in response.iter_body()]) if stream else response.body
                out.append((response.status, response.headers.get("x-k"), body))
        finally:
            await pool.aclose()
            server.close()
            await server.wait_closed()
        return out, pool.opened

    out, opened = asyncio.run(go())
    return out, opened, seen


def test_content_length_keep_alive_and_request_shape() -> None:
    answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-K: v\r\n\r\nok"] * 3
    out, opened, seen = _run(answers, 3, prefix="/gw")
    assert out == [(200, "v", b"ok")] * 3
    assert opened == 1  # one connection, kept alive
    assert seen[0] == (
        b"POST /gw/v1/x HTTP/1.1\r\nhost: 127.0.0.1:"
        + seen[0].split(b"host: 127.0.0.1:")[1].split(b"\r\n")[0]
        + b'\r\naccept: */*\r\na: 1\r\nx-request-id: 0\r\ncontent-length: 7\r\n\r\n{"i":0}'
    )


def test_chunked_with_trailers_and_streaming() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
    out, opened, _ = _run([chunked, chunked], 2, stream=True)
    assert out == [(200, None, b"abcde"), (200, None, b"abcde")]
    assert opened == 1


def test_no_length_reads_to_close_and_204_has_no_body() -> None:
    answers = [b"HTTP/1.1 204 No Content\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\nuntil close<close>"]
    out, opened, _ = _run(answers, 2)
    assert out == [(204, None, b""), (200, None, b"until close")]
    assert opened == 1


def test_connection_close_opens_a_new_connection() -> None:
    answers = [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na<close>",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb",
    ]
    out, opened, _ = _run(answers, 2)
    assert [o[2] for o in out] == [b"a", b"b"]
    assert opened == 2


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort<close>", RemoteProtocolError, "before the end"),
        (b"SMTP ready\r\n\r\n", RemoteProtocolError, "not an HTTP/1.1 status line"),
        (b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", RemoteProtocolError, "malformed header line"),
        (b"<close>", ReadError, "closed the connection without a response"),
    ],
)
def test_broken_answers(answer: bytes, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        _run([answer], 1)
