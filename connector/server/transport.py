"""HTTP through aiohttp for discovery's few requests (`dspark-vllm columns`): the only Python module that
touches an inference server, and the one place where what aiohttp (or the socket and TLS layers under it)
raises becomes the `ClientError` family. The prompts of Flink jobs go through the JVM's request step.

    >>> import asyncio
    >>> from connector.server.transport import Transport
    >>> async def health(url):
    ...     transport = Transport(url, connections=1, connect_timeout_s=5, tls=None, headers={}, max_body_bytes=1024)
    ...     try:
    ...         async with transport.request("GET", "/health") as response:
    ...             return response.status, await response.read()
    ...     finally:
    ...         await transport.aclose()

Why aiohttp: it handles interim 1xx responses and bounds decompression, and its C parser (llhttp) is cheap.
Redirects are not followed, nothing is taken from the environment (proxies, .netrc, SSL_CERT_FILE), no
cookies are kept.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping

import aiohttp
import aiohttp.client_exceptions as ce
import aiohttp.http_exceptions
import certifi

from connector.errors import (
    BodyTooLarge,
    ClientError,
    ConnectError,
    OptionsError,
    ProtocolError,
    RequestTimeout,
    StreamError,
    TLSError,
)

__all__ = ["EXCEPTION_MAP", "Response", "Transport", "mapped_errors", "tls_context"]

_KIB = 1024

# What each exception of aiohttp (and of the layers under it) means for us: (our class, what happened). The
# first class in an exception's MRO that is listed here decides. tests/test_transport.py
# fails when aiohttp exports an exception that is not listed by name.
EXCEPTION_MAP: dict[type[BaseException], tuple[type[ClientError], str]] = {
    ce.ClientConnectorCertificateError: (TLSError, "the server's certificate does not verify"),
    ce.ClientConnectorSSLError: (TLSError, "the TLS handshake failed"),
    ce.ClientSSLError: (TLSError, "the TLS handshake failed"),
    ce.ServerFingerprintMismatch: (TLSError, "the server's certificate fingerprint does not match"),
    ce.ConnectionTimeoutError: (ConnectError, "connecting timed out"),
    ce.ClientConnectorDNSError: (ConnectError, "the host name does not resolve"),
    ce.ClientProxyConnectionError: (ConnectError, "cannot connect to the proxy"),
    ce.ClientConnectorError: (ConnectError, "cannot connect to the server"),
    ce.ClientHttpProxyError: (ConnectError, "the proxy refused the connection"),
    ce.SocketTimeoutError: (RequestTimeout, "no data from the server in time"),
    ce.ServerTimeoutError: (RequestTimeout, "no answer from the server in time"),
    ce.ServerDisconnectedError: (StreamError, "the server closed the connection"),
    ce.ClientConnectionResetError: (StreamError, "the connection was reset"),
    ce.ClientOSError: (StreamError, "the connection broke"),
    ce.ServerConnectionError: (StreamError, "the connection to the server broke"),
    ce.ClientConnectionError: (StreamError, "the connection broke"),
    ce.ClientPayloadError: (StreamError, "the response body broke off"),
    ce.UploadAbortedError: (StreamError, "the request body could not be sent"),
    ce.ContentTypeError: (ProtocolError, "unexpected content type"),
    ce.WSServerHandshakeError: (ProtocolError, "not a WebSocket handshake"),
    ce.TooManyRedirects: (ProtocolError, "too many redirects"),
    ce.ClientResponseError: (ProtocolError, "not a valid HTTP/1.1 response"),
    ce.InvalidUrlRedirectClientError: (ProtocolError, "a redirect to an invalid URL"),
    ce.NonHttpUrlRedirectClientError: (ProtocolError, "a redirect to a URL that is not HTTP"),
    ce.InvalidUrlClientError: (ProtocolError, "an invalid URL"),
    ce.NonHttpUrlClientError: (ProtocolError, "a URL that is not HTTP"),
    ce.RedirectClientError: (ProtocolError, "a redirect that cannot be followed"),
    ce.InvalidURL: (ProtocolError, "an invalid URL"),
    ce.ClientError: (ProtocolError, "the request failed"),
    aiohttp.http_exceptions.HttpProcessingError: (ProtocolError, "not a valid HTTP/1.1 response"),
    ssl.SSLError: (TLSError, "TLS failed"),
    ssl.CertificateError: (TLSError, "the server's certificate does not match its name"),
    TimeoutError: (RequestTimeout, "timed out"),
    ConnectionError: (StreamError, "the connection broke"),
    OSError: (StreamError, "the connection broke"),
}


_ContentEncodingError = aiohttp.http_exceptions.ContentEncodingError


def _translate(exc: BaseException) -> ClientError | None:
    if isinstance(exc, ce.ClientPayloadError) and isinstance(exc.__cause__, _ContentEncodingError):
        # A body that its Content-Encoding does not decode (plain text sent as gzip, an encoding aiohttp cannot
        # decode): the same every time, unlike a body cut off by a broken connection.
        return ProtocolError(f"the body does not decode as its content-encoding says: {_detail(exc)}")
    for cls in type(exc).__mro__:
        entry = EXCEPTION_MAP.get(cls)
        if entry is not None:
            ours, what = entry
            return ours(f"{what}: {_detail(exc)}")
    return None


def _detail(exc: BaseException) -> str:
    cause = exc.__cause__
    if isinstance(exc, aiohttp.ClientResponseError):  # its str() leads with a made-up status 400
        text = exc.message if isinstance(exc.message, str) else str(exc.message)
    elif isinstance(exc, aiohttp.http_exceptions.HttpProcessingError):  # the same made-up 400
        text = exc.message
    elif isinstance(exc, ce.ClientPayloadError) and isinstance(cause, aiohttp.http_exceptions.HttpProcessingError):
        # "Response payload is not completed: <ContentLengthError: 400, message='...'>": the parser's own
        # message in place of its repr (or its str, which leads with the made-up 400)
        text = str(exc).replace(repr(cause), cause.message).replace(str(cause), cause.message)
    elif isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error = exc.certificate_error
        text = f"{exc.host}:{exc.port}: {getattr(error, 'verify_message', None) or error}"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        text = f"{exc.host}:{exc.port}: {exc.os_error}"
    else:
        text = str(exc)
    return " ".join(text.split()) or type(exc).__name__  # (aiohttp's parser errors span lines)


@contextlib.contextmanager
def mapped_errors() -> Iterator[None]:
    """Raise what goes wrong inside as a `ClientError` (the original is its __cause__). Cancellation and the
    caller's own deadline (TimeoutError from `asyncio.timeout`, outside this block) pass through."""
    try:
        yield
    except ClientError:
        raise
    except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, OSError) as exc:
        mapped = _translate(exc)
        if mapped is None:  # (every subclass of these three bases is in the map: this cannot happen)
            raise
        raise mapped from exc


def tls_context(
    verify: bool = True,
    ca_bundle: str | None = None,
    client_cert: str | None = None,
    client_key: str | None = None,
) -> ssl.SSLContext:
    """The TLS context for a server: `ca_bundle` (PEM) is the only trust when given, else certifi's public
    CAs; the system store and SSL_CERT_FILE/SSL_CERT_DIR are never read. With `verify=False` nothing is
    checked. `client_cert` (+ `client_key` if the key is in its own file) is presented to servers that ask."""
    try:
        if verify:
            context = ssl.create_default_context(cafile=ca_bundle or certifi.where())
        else:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    except (OSError, ssl.SSLError) as exc:
        raise OptionsError(
            f"cannot load the CA bundle {ca_bundle!r}: {exc}. Give a readable PEM file of the CA certificates "
            "that signed the server's certificate"
        ) from None
    if client_cert is not None:
        try:
            context.load_cert_chain(client_cert, client_key)
        except (OSError, ssl.SSLError) as exc:
            raise OptionsError(
                f"cannot load the client certificate {client_cert!r}: {exc}. Give a readable PEM certificate, "
                "and its private key in client_key unless the certificate file holds it"
            ) from None
    return context


class Response:
    """A response whose body is read in pieces, never more than `limit` bytes of it."""

    __slots__ = ("_limit", "_raw")

    def __init__(self, raw: aiohttp.ClientResponse, limit: int) -> None:
        self._raw = raw
        self._limit = limit

    @property
    def status(self) -> int:
        return self._raw.status

    @property
    def headers(self) -> Mapping[str, str]:  # (names compare case-insensitively)
        return self._raw.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (decompressed); raises BodyTooLarge once it passes the limit."""
        announced = self._raw.content_length
        if announced is not None and announced > self._limit:
            raise BodyTooLarge(f"the server announced {announced:,} bytes, more than the limit of {self._limit:,}")
        total = 0
        with mapped_errors():
            while chunk := await self._raw.content.readany():
                total += len(chunk)
                if total > self._limit:
                    raise BodyTooLarge(f"the body passed the limit of {self._limit:,} bytes; the rest was not read")
                yield chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])


class Transport:
    """Keep-alive connections to one server (at most `connections`), opened on first use in the running loop."""

    def __init__(
        self,
        base_url: str,
        *,
        connections: int,
        connect_timeout_s: float,
        tls: ssl.SSLContext | None,
        headers: Mapping[str, str],
        max_body_bytes: int,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_body_bytes = max_body_bytes
        self._connections = connections
        self._connect_timeout_s = connect_timeout_s
        self._tls = tls
        self._headers = dict(headers)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._connections,
            limit_per_host=0,
            ssl=self._tls if self._tls is not None else True,
            keepalive_timeout=30.0,
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers=self._headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            # A head line or field above this is a protocol error, not memory spent.
            max_line_size=16 * _KIB,
            max_field_size=16 * _KIB,
        )

    @contextlib.asynccontextmanager
    async def request(
        self, method: str, path: str, *, content: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[Response]:
        """Send one request; inside the block, read the response. Leaving the block early, or with an
        exception, closes the connection (a body not read to its end never goes back to the pool)."""
        if self._session is None:
            self._session = self._open()
        with mapped_errors():
            raw = await self._session.request(
                method, self.base_url + path, data=content, headers=headers, allow_redirects=False
            )
        try:
            yield Response(raw, self.max_body_bytes)
        except BaseException:
            raw.close()
            raise
        raw.release()

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def __repr__(self) -> str:
        return f"Transport({self.base_url!r}, connections={self._connections})"
