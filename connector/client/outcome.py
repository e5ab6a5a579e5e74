"""`Outcome`: what the client hands back for every request, whether it worked or not."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ERROR_KINDS", "Outcome", "valid_text"]

# "request": the payload itself cannot be sent; the others are `connector.errors.ClientError` kinds.
ERROR_KINDS = ("timeout", "connect", "status", "stream", "tls", "protocol", "too-large", "request")


def valid_text(text: str) -> str:
    """`text` as valid Unicode: each lone surrogate (a JSON escape such as "\\ud83d" in an error body, or a
    byte that is not UTF-8 in a header, which aiohttp decodes with surrogateescape) becomes the text of its
    escape, as in "\\ud83d"; the rest is unchanged. Escaped, not replaced with U+FFFD: the message then
    shows what the server sent, and two different bad inputs stay apart."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of one request, after all its attempts.

    `body` is the raw response body of the last attempt (the error JSON too, for a 4xx/5xx), or for a stream
    the assembled `chat.completion` / `text_completion` body; None when no complete response arrived.
    `error` is None exactly when the request succeeded (2xx and, for a stream, `[DONE]` and a
    `finish_reason` on every choice); a 2xx body is not checked further (that is the deserializer's job).
    Otherwise `error` is "kind: message" and `error_kind` the kind: one of `ERROR_KINDS`. `error` is always
    valid UTF-8 (lone surrogates escaped, see `valid_text`): Arrow and Flink can write it.
    """

    index: int  # position in the list that was submitted (0 for a single `send`)
    body: bytes | None
    status: int | None  # HTTP status of the last attempt; None: no response (connect error, timeout, reset)
    latency_ms: float  # `send` called -> last byte of the last attempt, backoff and waits included
    attempts: int
    request_id: str  # sent as x-request-id, the same on every attempt
    error: str | None
    ttft_ms: float | None = None  # streaming: last attempt sent -> first content chunk
    backoff_s: float = 0.0  # total time waited between attempts: backoff, and at the gate while the server was down
    error_kind: str | None = None  # None exactly when `error` is None

    def __post_init__(self) -> None:
        if self.error is not None and not self.error.isascii():
            object.__setattr__(self, "error", valid_text(self.error))

    @property
    def ok(self) -> bool:
        return self.error is None
