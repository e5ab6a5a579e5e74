"""A small HTTP/1.1 client on asyncio streams: the client's opt-in engine (`engine="asyncio"`).

Why: httpx + httpcore cost 2-3 ms of CPU per request here (about 3,000 Python calls: URL and header models,
cookies, a pool that polls every connection on every event), which capped the client at a few hundred
requests/s on one core; this engine costs 0.15-0.25 ms (benchmarks/bench_client.py; numbers in
docs/client-and-simulator.md).
It does only what the client needs: POST with a Content-Length body, responses with Content-Length, chunked
or read-to-close bodies, keep-alive, TLS through `ssl`; no proxies, no 1xx interim responses. httpx is the
default engine, and the engine whenever a `transport=` is injected.

Failures are raised as the exceptions below, named like httpx's so that messages read the same.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["ConnectError", "FastPool", "FastResponse", "ReadError", "RemoteProtocolError", "TLSError"]

_MAX_HEAD = 64 * 1024


class TransportError(Exception):
    """Base of this engine's failures."""


class ConnectError(TransportError):
    """The connection could not be made (refused, unreachable, DNS)."""


class TLSError(TransportError):
    """The TLS handshake failed (a certificate that does not verify): not worth a retry."""


class ReadError(TransportError):
    """The connection broke while the request or the response was on its way (reset, closed)."""


class RemoteProtocolError(TransportError):
    """The server broke HTTP/1.1 (a bad status line or head, a body shorter than announced)."""


@dataclass
class FastResponse:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes = b""
    _chunks: AsyncIterator[bytes] | None = field(default=None, repr=False)

    async def iter_body(self) -> AsyncIterator[bytes]:
        """The body as it arrives (for SSE); `body` is empty when the response was opened as a stream."""
        if self._chunks is None:
            if self.body:
                yield self.body
            return
        async for chunk in self._chunks:
            yield chunk


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.transport.abort()


class FastPool:
    """Keep-alive connections to one origin. The caller bounds how many requests run at once (the client's
    slots), so the pool opens at most that many connections; it keeps up to `max_idle` of them."""

    def __init__(
        self,
        base_url: str,
        *,
        max_idle: int,
        ssl_context: ssl.SSLContext | None,
        connect_timeout_s: float,
        headers: Mapping[str, str],
    ) -> None:
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.max_idle = max_idle
        self.ssl_context = ssl_context if self.tls else None
        if self.tls and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        self.connect_timeout_s = connect_timeout_s
        host_header = self.host if parts.port is None else f"{self.host}:{parts.port}"
        fixed = {"host": host_header, "accept": "*/*", **{k.lower(): v for k, v in headers.items()}}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._idle: list[_Conn] = []
        self.opened = 0

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=self.host if self.tls else None,
                    limit=_MAX_HEAD,
                ),
                self.connect_timeout_s,
            )
        except ssl.SSLError as exc:
            raise TLSError(str(exc)) from exc
        except TimeoutError:
            raise ConnectError(f"connect timed out after {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        self.opened += 1
        return _Conn(reader, writer)

    async def aclose(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    async def post(self, path: str, content: bytes, headers: Mapping[str, str], stream: bool = False) -> FastResponse:
        """POST `content` to `path`; with `stream`, the body is read through `FastResponse.iter_body()`,
        which must be read to its end (or the response dropped) before the next request."""
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head}"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + f"content-length: {len(content)}\r\n\r\n"
        ).encode("latin-1")
        conn = None
        while self._idle:
            idle = self._idle.pop()
            # A kept-alive connection the server closed meanwhile shows as EOF here (the loop saw the FIN).
            if idle.reader.at_eof() or idle.writer.transport.is_closing():
                idle.close()
            else:
                conn = idle
                break
        if conn is None:
            conn = await self._connect()
        try:
            conn.writer.write(head + content)
            status, response_headers = await self._read_head(conn)
        except BaseException:
            conn.close()
            raise
        try:
            if stream:
                chunks = self._body_chunks(conn, status, response_headers)
                return FastResponse(status, response_headers, b"", chunks)
            body = b"".join([c async for c in self._body_chunks(conn, status, response_headers)])
        except BaseException:
            conn.close()
            raise
        return FastResponse(status, response_headers, body)

    async def _read_head(self, conn: _Conn) -> tuple[int, dict[str, str]]:
        try:
            raw = await conn.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            raise ReadError("the server closed the connection without a response") from None
        except asyncio.LimitOverrunError:
            raise RemoteProtocolError("the response head is larger than 64 KiB") from None
        except (ConnectionError, OSError) as exc:
            raise ReadError(str(exc) or type(exc).__name__) from exc
        lines = raw[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise RemoteProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise RemoteProtocolError(f"malformed header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    async def _body_chunks(self, conn: _Conn, status: int, headers: dict[str, str]) -> AsyncIterator[bytes]:
        reader = conn.reader
        keep = headers.get("connection", "").lower() != "close"
        try:
            if status in (204, 304) or 100 <= status < 200:
                pass  # no body by definition (an interim 1xx is not expected from vLLM: the head was final)
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    try:
                        size = int(size_line.split(b";", 1)[0].strip(), 16)
                    except ValueError:
                        raise RemoteProtocolError(f"bad chunk size line {size_line[:40]!r}") from None
                    if size == 0:
                        while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                            pass
                        break
                    data = await reader.readexactly(size + 2)
                    yield data[:-2]
            elif "content-length" in headers:
                try:
                    length = int(headers["content-length"])
                except ValueError:
                    raise RemoteProtocolError(f"bad content-length {headers['content-length']!r}") from None
                if length:
                    yield await reader.readexactly(length)
            else:  # no length: the body runs to the end of the connection
                keep = False
                while data := await reader.read(65536):
                    yield data
        except asyncio.IncompleteReadError as exc:
            conn.close()
            raise RemoteProtocolError(
                f"the server closed the connection before the end of the body ({len(exc.partial)} bytes of "
                f"{exc.expected} in the last piece)"
            ) from None
        except asyncio.LimitOverrunError:
            conn.close()
            raise RemoteProtocolError("a chunk size line is too long") from None
        except (ConnectionError, OSError) as exc:
            conn.close()
            raise ReadError(str(exc) or type(exc).__name__) from exc
        except BaseException:
            conn.close()
            raise
        if keep and len(self._idle) < self.max_idle and not reader.at_eof():
            self._idle.append(conn)
        else:
            conn.close()
