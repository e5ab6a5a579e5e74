"""A scripted HTTP/1.1 server on 127.0.0.1 for the client tests (not a test module): each answer as raw bytes.

Test modules import from here, never from one another (issue 29).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

OK_BODY = b'{"id":"c","object":"chat.completion","choices":[]}'


def http(status: int, body: bytes = OK_BODY, headers: bytes = b"", reason: bytes = b"X") -> bytes:
    return b"HTTP/1.1 %d %s\r\ncontent-length: %d\r\n%s\r\n" % (status, reason, len(body), headers) + body


@contextlib.asynccontextmanager
async def raw_server(answer: Any) -> AsyncIterator[tuple[str, list[tuple[float, bytes, bytes]]]]:
    """A keep-alive HTTP/1.1 server on this loop: `answer(head, body)` gives the raw bytes to write (None:
    close the connection). Yields its URL and the requests it read: (time, head, body)."""
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
                writer.write(raw)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen
    finally:
        server.close()


def prompt_of(body: bytes) -> str:
    return json.loads(body)["messages"][0]["content"]
