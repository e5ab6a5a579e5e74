"""A scripted HTTP/1.1 server on 127.0.0.1 for the client tests (not a test module): each answer as raw bytes.

Test modules import from here, never from one another.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

OK_BODY = b'{"id":"c","object":"chat.completion","choices":[]}'


def http(status: int, body: bytes = OK_BODY, headers: bytes = b"", reason: bytes = b"X") -> bytes:
    return b"HTTP/1.1 %d %s\r\ncontent-length: %d\r\n%s\r\n" % (status, reason, len(body), headers) + body


@dataclass(frozen=True)
class Reply:
    """An answer with a misbehaviour: wait `delay_s`, write `raw`, then 'keep' the connection for the next
    request, 'close' it, 'reset' it (an RST: SO_LINGER 0) or 'hang' (hold it open, answering nothing more)."""

    raw: bytes
    delay_s: float = 0.0
    then: str = "keep"


@contextlib.asynccontextmanager
async def raw_server(answer: Any) -> AsyncIterator[tuple[str, list[tuple[float, bytes, bytes]]]]:
    """A keep-alive HTTP/1.1 server on this loop: `answer(head, body)` gives the raw bytes to write (None:
    close the connection), or a `Reply`. Yields its URL and the requests it read: (time, head, body)."""
    seen: list[tuple[float, bytes, bytes]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                body = await reader.readexactly(int(length.group(1))) if length else b""
                seen.append((asyncio.get_running_loop().time(), head, body))
                raw = answer(head, body)
                if raw is None:
                    break
                reply = raw if isinstance(raw, Reply) else Reply(raw)
                if reply.delay_s:
                    await asyncio.sleep(reply.delay_s)
                writer.write(reply.raw)
                await writer.drain()
                if reply.then == "close":
                    break
                if reply.then == "reset":
                    await asyncio.sleep(0.05)  # (the bytes reach the client before the RST that would drop them)
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if reply.then == "hang":
                    await asyncio.Event().wait()  # (cancelled when the test's loop ends)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen
    finally:
        server.close()
