"""The exceptions of dspark-vllm.

    DsparkError
    ├── ProfileError          a profile file is missing or malformed (names the file and the key)
    ├── OptionsError          table options or CLI arguments are invalid (names the option and the fix)
    ├── BackendUnavailable    the asked-for parse backend cannot run here (says what to install or set)
    ├── SchemaDiscoveryError  the endpoint's schema could not be fetched or understood
    └── ClientError           a request of discovery's to the inference server failed; `kind` says how
        ├── RequestTimeout    "timeout"    the attempt's deadline passed before the response was complete
        ├── ConnectError      "connect"    no connection: refused, unreachable, DNS, connect timeout
        ├── StreamError       "stream"     the connection broke off mid-response, or an SSE stream broke its rules
        ├── TLSError          "tls"        the TLS handshake failed (a certificate that does not verify)
        ├── ProtocolError     "protocol"   the answer is not HTTP/1.1 (a bad status line, header or chunk)
        └── BodyTooLarge      "too-large"  the response body is larger than the client's limit

Errors in the *data* are never raised: a bad body becomes an error row (see `connector.parse`). The kinds are
those of a failed request's error row ("kind: message"), as the JVM's request step writes it
(`connector.server.outcome.ERROR_KINDS`; "status", a non-2xx answer, has no class here: discovery reads the
status itself); here they are raised by discovery's transport.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BackendUnavailable",
    "BodyTooLarge",
    "ClientError",
    "ConnectError",
    "DsparkError",
    "OptionsError",
    "ProfileError",
    "ProtocolError",
    "RequestTimeout",
    "SchemaDiscoveryError",
    "StreamError",
    "TLSError",
]


class DsparkError(Exception):
    """Base class of every exception this package raises on purpose."""


class ProfileError(DsparkError):
    """A model profile could not be loaded: the message names the file, the key and what was expected."""


class OptionsError(DsparkError):
    """Invalid connector options or command-line arguments."""


class BackendUnavailable(DsparkError):
    """The parse backend that was asked for cannot run on this machine."""


class SchemaDiscoveryError(DsparkError):
    """The schema of an endpoint could not be discovered."""


class ClientError(DsparkError):
    """One request failed. `str()` is "kind: message", never an empty message."""

    kind: ClassVar[str] = "client"

    def __init__(self, message: str) -> None:
        message = message.strip() or (self.__doc__ or self.kind).splitlines()[0].rstrip(".")
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class RequestTimeout(ClientError):
    """The attempt's deadline passed before the response was complete."""

    kind = "timeout"


class ConnectError(ClientError):
    """No connection could be made to the server."""

    kind = "connect"


class StreamError(ClientError):
    """The response broke off before its end, or a server-sent event stream broke its rules."""

    kind = "stream"


class TLSError(ClientError):
    """The TLS handshake failed."""

    kind = "tls"


class ProtocolError(ClientError):
    """The server's answer is not valid HTTP/1.1, or one the client could not handle."""

    kind = "protocol"


class BodyTooLarge(ClientError):
    """The response body is larger than the client's limit."""

    kind = "too-large"
