"""`VllmClient`: vLLM's /v1/chat/completions and /v1/completions over aiohttp, raw bytes out.

    >>> import asyncio
    >>> from connector.client import VllmClient
    >>> async def main(url):
    ...     async with VllmClient(url, concurrency=32) as client:
    ...         return await client.send_all([{"messages": [{"role": "user", "content": "hi"}]}])

Every request gets an `Outcome`; a failure is data, never an exception, and never fails the others.
Bounded concurrency (attempts in flight <= `concurrency`, a keep-alive pool of that size), a deadline per
attempt and one per request, retries with exponential backoff and jitter on connect errors, timeouts, broken
connections and 408/429/502/503/504 (the wait is the backoff, or the server's `Retry-After` when longer, capped
by `max_retry_after_s`), a gate that holds requests back while the server is down (`connector.client.gate`), a
cap on body size, an optional rate limit. Whatever goes wrong inside one attempt, even an exception nobody
foresaw, ends as that request's outcome (`_attempt`), never as an exception out of `send_all`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

from connector.client.gate import Gate
from connector.client.outcome import Outcome
from connector.client.ratelimit import RateLimiter
from connector.client.retry import RETRYABLE_STATUS, parse_retry_after, retry_delay
from connector.client.sse import StreamAssembler
from connector.client.transport import Transport, tls_context
from connector.errors import ClientError, OptionsError, ProtocolError, RequestTimeout, StatusError, TLSError
from connector.params import body_defaults, check_params
from connector.profiles import Profile, load_profile

__all__ = ["ClientConfig", "VllmClient", "endpoint_for", "open_transport", "prepare_request", "response_format_of"]

USER_AGENT = "dspark-vllm/0.1"
MIB = 1024 * 1024
# Statuses that say a gateway cannot reach the server (it is down or restarting): they close the gate.
_DOWN_STATUS = frozenset({502, 503})
_BREAKS = frozenset("\r\n")
_TLS_HINT = "set ca_bundle to the CA that signed the server's certificate (verify=False only for a server you trust)"
# An error body larger than this is not a JSON error object worth parsing: its first bytes are the message.
_ERROR_JSON_MAX_BYTES = 1024 * 1024
logger = logging.getLogger("connector.client")


@dataclass(frozen=True)
class ClientConfig:
    """Options of `VllmClient` (the connector's `request.*` options map onto these)."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # sent as a Bearer token; nothing is read implicitly
    model: str | None = None  # set on requests that name none
    concurrency: int = 64  # attempts in flight at once, and the size of the keep-alive pool
    timeout_s: float = 60.0  # deadline of one attempt, first byte sent to last byte read
    connect_timeout_s: float = 10.0
    deadline_s: float = 300.0  # the most one request takes: attempts, backoff and waits at the gate together
    max_attempts: int | None = None  # None: as many as fit in deadline_s; 1 = no retries
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    max_retry_after_s: float = 60.0  # a longer Retry-After is cut to this
    hold_while_down: bool = True  # a failed connect closes a gate that holds attempts back until the server answers
    rate_limit: float | None = None  # requests (attempts) per second
    max_body_bytes: int = 32 * MIB  # a larger response is an error of kind too-large; its connection is closed
    verify: bool = True  # TLS verification; off only when asked
    ca_bundle: str | None = None  # PEM file of the CAs to trust (else certifi's); nothing from the environment
    client_cert: str | None = None  # PEM certificate shown to a server that asks for one
    client_key: str | None = None  # its private key, when not in the client_cert file
    structured_output: Profile | str | None = None  # send this profile's content schema as response_format
    stream: bool = False  # SSE, assembled into the non-streaming body shape
    params: Mapping[str, Any] = field(default_factory=dict)  # body defaults: n, temperature, ... (params.py)
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks = [
            (self.concurrency >= 1, "concurrency", "at least 1"),
            (self.timeout_s > 0, "timeout_s", "> 0"),
            (self.connect_timeout_s > 0, "connect_timeout_s", "> 0"),
            (self.deadline_s > 0, "deadline_s", "> 0"),
            (self.max_attempts is None or self.max_attempts >= 1, "max_attempts", "at least 1 (1 = no retries)"),
            (
                self.backoff_initial_s >= 0 and self.backoff_max_s >= 0,
                "backoff_initial_s/backoff_max_s",
                ">= 0",
            ),
            (self.max_retry_after_s >= 0, "max_retry_after_s", ">= 0"),
            (self.rate_limit is None or self.rate_limit > 0, "rate_limit", "> 0 requests/s, or None"),
            (self.max_body_bytes >= 1024, "max_body_bytes", "at least 1024"),
            (self.verify or self.ca_bundle is None, "ca_bundle", "unset when verify=False (nothing is verified)"),
            (self.client_key is None or self.client_cert is not None, "client_key", "given with client_cert"),
            (
                all(
                    isinstance(k, str) and isinstance(v, str) and not _BREAKS & set(k + v)
                    for k, v in self.headers.items()
                ),
                "headers",
                "strings without line breaks",
            ),
        ]
        for ok, name, rule in checks:
            if not ok:
                raise OptionsError(f"client option '{name}' must be {rule}")
        if not self.base_url.startswith(("http://", "https://")):
            raise OptionsError(f"client option 'base_url' must start with http:// or https://, got {self.base_url!r}")
        check_params(self.params)

    @property
    def root_url(self) -> str:
        """The server root: `base_url` without a trailing `/v1` (both spellings are accepted)."""
        url = self.base_url.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url


def open_transport(config: ClientConfig, connections: int | None = None) -> Transport:
    """The transport a config asks for: TLS, headers (the API key only if the config has one), body limit."""
    headers = {"user-agent": USER_AGENT, **config.headers}
    if config.api_key:
        headers["authorization"] = f"Bearer {config.api_key}"
    tls: ssl.SSLContext | None = None
    if config.root_url.startswith("https://"):
        tls = tls_context(config.verify, config.ca_bundle, config.client_cert, config.client_key)
    return Transport(
        config.root_url,
        connections=connections or config.concurrency,
        connect_timeout_s=config.connect_timeout_s,
        tls=tls,
        headers=headers,
        max_body_bytes=config.max_body_bytes,
    )


def endpoint_for(payload: Mapping[str, Any]) -> str | None:
    """`/v1/chat/completions` for a request with `messages`, `/v1/completions` with `prompt`, else None."""
    if "messages" in payload:
        return "/v1/chat/completions"
    if "prompt" in payload:
        return "/v1/completions"
    return None


def response_format_of(config: ClientConfig) -> dict[str, Any] | None:
    """The `response_format` a config sends (its structured-output profile's content schema), or None."""
    if config.structured_output is None:
        return None
    profile = config.structured_output
    profile = profile if isinstance(profile, Profile) else load_profile(profile)
    response_format = profile.response_format()
    if response_format is None:
        raise OptionsError(f"profile {profile.name!r} has no content schema to send as response_format")
    return response_format


def prepare_request(
    config: ClientConfig,
    payload: Mapping[str, Any],
    defaults: Mapping[bool, Mapping[str, Any]] | None = None,
    response_format: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A request as sent (pure): the default model, parameters (`defaults` by chat-or-not, else made from
    `config.params`), `response_format` and stream options filled in; the payload's own values win."""
    request = dict(payload)
    if config.model and not request.get("model"):
        request["model"] = config.model
    chat = "messages" in request
    chosen = defaults[chat] if defaults is not None else body_defaults(config.params, chat=chat)
    for name, value in chosen.items():
        # A payload that sets logprobs itself says what it wants of top_logprobs too.
        if name not in request and not (name == "top_logprobs" and "logprobs" in request):
            request[name] = value
    if response_format is not None and "response_format" not in request:
        request["response_format"] = response_format
    if config.stream and "stream" not in request:
        request["stream"] = True
    if request.get("stream"):
        given = request.get("stream_options")
        if given is not None and not isinstance(given, Mapping):
            raise OptionsError("'stream_options' is not a JSON object (a mapping)")
        options = dict(given or {})
        options.setdefault("include_usage", True)
        request["stream_options"] = options
    return request


@dataclass
class _Attempt:
    status: int | None = None
    body: bytes | None = None
    error: ClientError | None = None
    retry_after: float | None = None
    ttft_ms: float | None = None


class VllmClient:
    """Async client; use as `async with VllmClient(url, ...) as client`, or call `aclose()`."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        config: ClientConfig | None = None,
        transport: Transport | None = None,
        rng: random.Random | None = None,
        **options: Any,
    ) -> None:
        if config is None:
            if base_url is None:
                raise OptionsError("give the server's base_url (http://host:port) or a ClientConfig")
            config = ClientConfig(base_url=base_url, **options)
        elif base_url is not None or options:
            changes: dict[str, Any] = {"base_url": base_url} if base_url else {}
            config = replace(config, **changes, **options)
        self.config = config
        self._rng = rng or random.Random()
        self._response_format = response_format_of(config)
        self._defaults = {chat: body_defaults(config.params, chat=chat) for chat in (True, False)}
        self._transport = transport or open_transport(config)
        self._slots = asyncio.Semaphore(config.concurrency)
        self._limiter = RateLimiter(config.rate_limit) if config.rate_limit else None
        self.gate = (
            Gate(self._probe, config.backoff_initial_s, config.backoff_max_s, self._rng)
            if config.hold_while_down
            else None
        )
        self._unexpected_logged: set[type[BaseException]] = set()  # exception types logged with a traceback

    def __repr__(self) -> str:
        return f"VllmClient({self.config.root_url!r}, concurrency={self.config.concurrency})"

    async def __aenter__(self) -> VllmClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self.gate is not None:
            await self.gate.aclose()
        await self._transport.aclose()

    # --- one request -------------------------------------------
    def prepare(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The request as sent: the default model, parameters, response_format and stream options filled in."""
        return prepare_request(self.config, payload, self._defaults, self._response_format)

    async def send(self, payload: Mapping[str, Any], *, index: int = 0, request_id: str | None = None) -> Outcome:
        """Send one request (chat if it has `messages`, completions if `prompt`), retrying as configured."""
        request_id = request_id or uuid.uuid4().hex
        if not isinstance(payload, Mapping):
            return _invalid(index, request_id, "the request is not a JSON object (a mapping)")
        endpoint = endpoint_for(payload)
        if endpoint is None:
            return _invalid(index, request_id, "the request has neither 'messages' nor 'prompt'")
        try:
            request = self.prepare(payload)
        except OptionsError as exc:
            return _invalid(index, request_id, str(exc))
        try:
            content = json.dumps(request, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            return _invalid(index, request_id, f"the request is not JSON-serialisable: {exc}")
        stream = bool(request.get("stream"))
        cfg = self.config
        start = time.monotonic()
        deadline = start + cfg.deadline_s
        attempts = 0
        waited = 0.0
        result = _Attempt()
        why = ""  # why it gave up, where the error does not say
        while True:
            if self.gate is not None and not self.gate.is_open:
                before = time.monotonic()
                opened = await self.gate.wait(deadline - before)
                waited += time.monotonic() - before
                if not opened:
                    result.error = result.error or self.gate.reason
                    break
            if self._limiter is not None:
                await self._limiter.acquire()
            async with self._slots:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if result.error is None:
                        result.error = RequestTimeout(
                            f"the request's deadline of {cfg.deadline_s:g} s passed before a connection was free"
                        )
                    break
                attempts += 1
                before_this = result
                result = await self._attempt(endpoint, content, request_id, stream, min(cfg.timeout_s, remaining))
                if remaining < cfg.timeout_s and result.error is not None and result.error.kind == "timeout":
                    # The deadline, not the server, cut this attempt short: the error that led to it says more.
                    result = before_this if before_this.error is not None else result
            self._judge_server(result)
            if result.error is None or not result.error.retryable:
                break
            if cfg.max_attempts is not None and attempts >= cfg.max_attempts:
                break
            if self.gate is not None and not self.gate.is_open and result.status is None:
                continue  # no connection: the gate's probes pace the next attempt
            # (a 502/503 that closed the gate waits too: its gateway answers, and so may /health, which would
            # open the gate after one short probe step every time)
            delay = retry_delay(
                attempts, result.retry_after, cfg.backoff_initial_s, cfg.backoff_max_s, cfg.max_retry_after_s, self._rng
            )
            if time.monotonic() + delay >= deadline:
                asked = result.retry_after is not None and delay == min(result.retry_after, cfg.max_retry_after_s)
                left = max(0.0, deadline - time.monotonic())
                waits = "Retry-After" if asked else "backoff"
                why = f": the {waits} wait of {delay:.1f} s ends past the deadline, {left:.1f} s away"
                break
            logger.debug(
                "request %s: attempt %d failed (%s); retrying in %.3f s", request_id, attempts, result.error, delay
            )
            waited += delay
            await asyncio.sleep(delay)
        error = result.error
        text = None if error is None else str(error)
        if error is not None and (error.retryable or attempts == 0):
            elapsed = time.monotonic() - start
            text = f"{text} (gave up after {attempts} attempt{'' if attempts == 1 else 's'} in {elapsed:.1f} s{why})"
        latency_ms = (time.monotonic() - start) * 1000.0
        kind = None if error is None else error.kind
        return Outcome(
            index, result.body, result.status, latency_ms, attempts, request_id, text, result.ttft_ms, waited, kind
        )

    def _judge_server(self, result: _Attempt) -> None:
        """Close the gate on an attempt that found the server down, open it on one that reached it."""
        if self.gate is None:
            return
        error = result.error
        if error is not None and (error.kind == "connect" or result.status in _DOWN_STATUS):
            self.gate.close(error)
        elif result.status is not None:
            self.gate.open()

    async def _probe(self) -> bool:
        """While the gate is closed: does the server answer (anything below 500) on /health?"""
        try:
            async with asyncio.timeout(self.config.connect_timeout_s + 5.0):
                async with self._transport.request("GET", "/health") as response:
                    return response.status < 500
        except (ClientError, TimeoutError):
            return False

    async def _attempt(
        self, endpoint: str, content: bytes, request_id: str, stream: bool, timeout_s: float
    ) -> _Attempt:
        """One attempt, never raising: the single place where a request meets the network."""
        headers = {"x-request-id": request_id, "content-type": "application/json"}
        started = time.monotonic()
        status: int | None = None  # kept when the body fails after the head arrived
        try:
            async with (
                asyncio.timeout(timeout_s),
                self._transport.request("POST", endpoint, content=content, headers=headers) as response,
            ):
                status = response.status
                if stream and status == 200:
                    return await _read_stream(response.chunks(), started, self.config.max_body_bytes)
                return _judge(status, await response.read(), response.headers)
        except TimeoutError:
            return _Attempt(status=status, error=RequestTimeout(f"no complete response within {timeout_s:g} s"))
        except TLSError as exc:
            return _Attempt(error=TLSError(f"{exc.message}; {_TLS_HINT}"))
        except ClientError as exc:
            return _Attempt(status=status, error=exc)
        except Exception as exc:  # (cancellation and KeyboardInterrupt are no Exception: they pass)
            # A response that the code above did not foresee (a bug, here or in a library): this request's
            # outcome, never the end of every other request's.
            return _Attempt(status=status, error=self._unexpected(exc, request_id))

    def _unexpected(self, exc: Exception, request_id: str) -> ProtocolError:
        """The error of an attempt that raised `exc`, logged with its traceback (the first of each type)."""
        name = type(exc).__name__
        if type(exc) not in self._unexpected_logged:
            self._unexpected_logged.add(type(exc))
            logger.error("request %s: unexpected %s while handling the response", request_id, name, exc_info=exc)
        else:
            logger.debug("request %s: unexpected %s while handling the response", request_id, name, exc_info=exc)
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 300 else detail[:300] + "..."
        message = f"the client could not handle the response: {name}: {detail}".rstrip(": ")
        return ProtocolError(message, retryable=False)  # (the same answer would fail the same way)

    # --- many requests -----------------------------------------
    async def iter_outcomes(self, payloads: Iterable[Mapping[str, Any]]) -> AsyncIterator[Outcome]:
        """Outcomes as they complete (in any order; `Outcome.index` says which request). The iterable is read
        lazily: at most about 2 x concurrency requests are held at once."""
        queue: asyncio.Queue[Outcome | None] = asyncio.Queue()
        source = iter(enumerate(payloads))
        workers_n = self.config.concurrency * 2  # more than the slots, so backoff sleeps leave no slot idle

        async def worker() -> None:
            try:
                for index, payload in source:
                    await queue.put(await self.send(payload, index=index))
            finally:
                await queue.put(None)

        tasks = [asyncio.create_task(worker()) for _ in range(workers_n)]
        try:
            running = workers_n
            while running:
                item = await queue.get()
                if item is None:
                    running -= 1
                else:
                    yield item
            for task in tasks:
                task.result()  # re-raise a bug in a worker rather than lose outcomes silently
        finally:
            for task in tasks:
                task.cancel()

    async def send_all(self, payloads: Iterable[Mapping[str, Any]]) -> list[Outcome]:
        """One outcome per request, in the order given."""
        outcomes = [outcome async for outcome in self.iter_outcomes(payloads)]
        outcomes.sort(key=lambda o: o.index)
        return outcomes


def _invalid(index: int, request_id: str, message: str) -> Outcome:
    return Outcome(index, None, None, 0.0, 0, request_id, f"request: {message}", error_kind="request")


def _judge(status: int, body: bytes, headers: Mapping[str, str]) -> _Attempt:
    if 200 <= status < 300:
        return _Attempt(status=status, body=body)
    retryable = status in RETRYABLE_STATUS
    message = _error_message(body)
    if 300 <= status < 400:
        message = f"redirects are not followed: point base_url at {headers.get('location', 'the new address')}"
    return _Attempt(
        status=status,
        body=body,
        error=StatusError(f"HTTP {status}: {message}", status=status, retryable=retryable),
        retry_after=parse_retry_after(headers.get("retry-after")) if retryable else None,
    )


def _error_message(body: bytes) -> str:
    """The message of an error body: vLLM's `{"error": {"message": ...}}` (or FastAPI's `detail`), else the
    first bytes of the body. Bounded: a body over 1 MiB is not parsed, nor is one nested beyond the parser's
    recursion limit (`[` * 100000 raises RecursionError in json)."""
    try:
        data = json.loads(body) if len(body) <= _ERROR_JSON_MAX_BYTES else None
        if isinstance(data, dict):
            error = data.get("error", data.get("detail"))
            if isinstance(error, dict) and "message" in error:
                return str(error["message"])[:500]
            if error is not None:
                return str(error)[:500]
    except (ValueError, RecursionError):
        pass
    text = body[:200].decode("utf-8", "replace").strip()
    return text or "(empty body)"


async def _read_stream(chunks: AsyncIterator[bytes], started: float, max_body_bytes: int) -> _Attempt:
    assembler = StreamAssembler(max_body_bytes)
    ttft: float | None = None
    try:
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            async for data in chunks:
                assembler.feed(data)
                if ttft is None and assembler.first_token:
                    ttft = (time.monotonic() - started) * 1000.0
        body = assembler.finish()
    except ClientError as exc:  # a broken event, a broken connection, too large
        return _Attempt(status=200, body=assembler.error_body, error=exc, ttft_ms=ttft)
    return _Attempt(status=200, body=body, ttft_ms=ttft)
