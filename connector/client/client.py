"""`VllmClient`: an httpx.AsyncClient for vLLM's /v1/chat/completions and /v1/completions (raw bytes out).

    >>> import asyncio
    >>> from connector.client import VllmClient
    >>> async def main(url):
    ...     async with VllmClient(url, concurrency=32) as client:
    ...         return await client.send_all([{"messages": [{"role": "user", "content": "hi"}]}])

Every request gets an `Outcome`; a failure is data, never an exception, and never fails the others.
Bounded concurrency (attempts in flight <= `concurrency`, a keep-alive pool of that size), a deadline per
attempt, retries with exponential backoff and jitter on connect errors, timeouts, broken connections and
429/502/503/504 (`Retry-After` honoured, capped by `max_retry_after_s`), an optional rate limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

import httpx

from connector.client import fasthttp
from connector.client.fasthttp import FastPool
from connector.client.outcome import Outcome
from connector.client.ratelimit import RateLimiter
from connector.client.retry import RETRYABLE_STATUS, backoff_delay, parse_retry_after
from connector.client.sse import StreamAssembler, StreamError
from connector.errors import OptionsError
from connector.profiles import Profile, load_profile

__all__ = ["API_KEY_ENV", "ClientConfig", "VllmClient", "endpoint_for"]

API_KEY_ENV = "DSPARK_VLLM_API_KEY"
USER_AGENT = "dspark-vllm/0.1"
ENGINES = ("asyncio", "httpx")
# httpx by default (a well-kept library: proxies, HTTP edge cases); "asyncio" is the opt-in engine of
# connector/client/fasthttp.py, ~10x less CPU per request (docs/client-and-simulator.md).
DEFAULT_ENGINE = "httpx"
_TLS_HINT = "Check the certificate, or set verify=False only for a server you trust"
POOL_SHARD = 4  # connections per httpx pool (see VllmClient.__init__)
logger = logging.getLogger("connector.client")


@dataclass(frozen=True)
class ClientConfig:
    """Options of `VllmClient` (the connector's `request.*` options map onto these)."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # else $api_key_env; sent as a Bearer token
    api_key_env: str = API_KEY_ENV
    model: str | None = None  # set on requests that name none
    concurrency: int = 64  # attempts in flight at once, and the size of the keep-alive pool
    timeout_s: float = 60.0  # deadline of one attempt, first byte sent to last byte read
    connect_timeout_s: float = 10.0
    max_attempts: int = 4  # 1 = no retries
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    max_retry_after_s: float = 60.0  # a longer Retry-After is cut to this
    rate_limit: float | None = None  # requests (attempts) per second
    verify: bool | str = True  # TLS verification (or a CA bundle path); off only when asked
    structured_output: Profile | str | None = None  # send this profile's content schema as response_format
    stream: bool = False  # SSE, assembled into the non-streaming body shape
    headers: Mapping[str, str] = field(default_factory=dict)
    engine: str | None = None  # "httpx" (default) or "asyncio" (fasthttp.py); an injected transport means httpx

    def __post_init__(self) -> None:
        checks = [
            (self.concurrency >= 1, "concurrency", "at least 1"),
            (self.timeout_s > 0, "timeout_s", "> 0"),
            (self.connect_timeout_s > 0, "connect_timeout_s", "> 0"),
            (self.max_attempts >= 1, "max_attempts", "at least 1 (1 = no retries)"),
            (
                self.backoff_initial_s >= 0 and self.backoff_max_s >= 0,
                "backoff_initial_s/backoff_max_s",
                ">= 0",
            ),
            (self.rate_limit is None or self.rate_limit > 0, "rate_limit", "> 0 requests/s, or None"),
        ]
        checks.append((self.engine in (None, *ENGINES), "engine", f"one of {', '.join(ENGINES)}"))
        for ok, name, rule in checks:
            if not ok:
                raise OptionsError(f"client option '{name}' must be {rule}")
        if not self.base_url.startswith(("http://", "https://")):
            raise OptionsError(f"client option 'base_url' must start with http:// or https://, got {self.base_url!r}")

    @property
    def root_url(self) -> str:
        """The server root: `base_url` without a trailing `/v1` (both spellings are accepted)."""
        url = self.base_url.rstrip("/")
        return url[:-3] if url.endswith("/v1") else url

    def resolve_api_key(self) -> str | None:
        return self.api_key if self.api_key is not None else (os.environ.get(self.api_key_env) or None)


def endpoint_for(payload: Mapping[str, Any]) -> str | None:
    """`/v1/chat/completions` for a request with `messages`, `/v1/completions` with `prompt`, else None."""
    if "messages" in payload:
        return "/v1/chat/completions"
    if "prompt" in payload:
        return "/v1/completions"
    return None


@dataclass
class _Attempt:
    status: int | None = None
    body: bytes | None = None
    error: str | None = None
    retryable: bool = False
    retry_after: float | None = None
    ttft_ms: float | None = None


class VllmClient:
    """Async client; use as `async with VllmClient(url, ...) as client`, or call `aclose()`."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        config: ClientConfig | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
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
        self._response_format = None
        if config.structured_output is not None:
            profile = config.structured_output
            profile = profile if isinstance(profile, Profile) else load_profile(profile)
            self._response_format = profile.response_format()
            if self._response_format is None:
                raise OptionsError(f"profile {profile.name!r} has no content schema to send as response_format")
        headers = {"user-agent": USER_AGENT, "content-type": "application/json", **config.headers}
        api_key = config.resolve_api_key()
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.engine = "httpx" if transport is not None else (config.engine or DEFAULT_ENGINE)
        verify = _ssl_context(config.verify)  # one context for every pool (each costs milliseconds to make)
        self._pool: FastPool | None = None
        if self.engine == "asyncio":
            self._pool = FastPool(
                config.root_url,
                max_idle=config.concurrency,
                ssl_context=verify if isinstance(verify, ssl.SSLContext) else _no_verify_context(),
                connect_timeout_s=config.connect_timeout_s,
                headers=headers,
            )
        # httpcore's pool scans every connection on every request event (O(pool size) work, polls included),
        # which made 64+ connections in one pool several times slower than 16: so the pool is split into
        # shards of POOL_SHARD connections, and each attempt goes to the shard with the most free room.
        # An injected transport is one pool: it is used as it is.
        if self._pool is not None:
            sizes = []
        elif transport is not None:
            sizes = [config.concurrency]
        else:
            sizes = _shard_sizes(config.concurrency)
        self._shards = [
            httpx.AsyncClient(
                base_url=config.root_url,
                headers=headers,
                timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s),
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size, keepalive_expiry=30.0),
                verify=verify,
                transport=transport,
                trust_env=False,
            )
            for size in sizes
        ]
        self._free = list(sizes)
        self._slots = asyncio.Semaphore(config.concurrency)
        self._limiter = RateLimiter(config.rate_limit) if config.rate_limit else None

    def __repr__(self) -> str:
        return f"VllmClient({self.config.root_url!r}, concurrency={self.config.concurrency})"

    async def __aenter__(self) -> VllmClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
        for shard in self._shards:
            await shard.aclose()

    # --- one request -------------------------------------------
    def prepare(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The request as sent: the default model, response_format and stream options filled in."""
        request = dict(payload)
        if self.config.model and not request.get("model"):
            request["model"] = self.config.model
        if self._response_format is not None and "response_format" not in request:
            request["response_format"] = self._response_format
        if self.config.stream and "stream" not in request:
            request["stream"] = True
        if request.get("stream"):
            options = dict(request.get("stream_options") or {})
            options.setdefault("include_usage", True)
            request["stream_options"] = options
        return request

    async def send(self, payload: Mapping[str, Any], *, index: int = 0, request_id: str | None = None) -> Outcome:
        """Send one request (chat if it has `messages`, completions if `prompt`), retrying as configured."""
        request_id = request_id or uuid.uuid4().hex
        endpoint = endpoint_for(payload)
        if endpoint is None:
            return Outcome(index, None, None, 0.0, 0, request_id, "the request has neither 'messages' nor 'prompt'")
        request = self.prepare(payload)
        try:
            content = json.dumps(request, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            return Outcome(index, None, None, 0.0, 0, request_id, f"the request is not JSON-serialisable: {exc}")
        stream = bool(request.get("stream"))
        cfg = self.config
        start = time.perf_counter()
        attempts = 0
        slept = 0.0
        while True:
            attempts += 1
            if self._limiter is not None:
                await self._limiter.acquire()
            async with self._slots:
                result = await self._attempt(endpoint, content, request_id, stream)
            if not result.retryable or attempts >= cfg.max_attempts:
                break
            if result.retry_after is not None:
                delay = min(result.retry_after, cfg.max_retry_after_s)
            else:
                delay = backoff_delay(attempts, cfg.backoff_initial_s, cfg.backoff_max_s, self._rng)
            logger.debug(
                "request %s: attempt %d/%d failed (%s); retrying in %.3f s",
                request_id,
                attempts,
                cfg.max_attempts,
                result.error,
                delay,
            )
            slept += delay
            await asyncio.sleep(delay)
        error = result.error
        if error is not None and result.retryable:
            error = f"{error} (gave up after {attempts} attempts)"
        latency_ms = (time.perf_counter() - start) * 1000.0
        return Outcome(
            index, result.body, result.status, latency_ms, attempts, request_id, error, result.ttft_ms, slept
        )

    async def _attempt(self, endpoint: str, content: bytes, request_id: str, stream: bool) -> _Attempt:
        if self._pool is not None:
            return await self._attempt_fast(self._pool, endpoint, content, request_id, stream)
        return await self._attempt_httpx(endpoint, content, request_id, stream)

    async def _attempt_fast(
        self, pool: FastPool, endpoint: str, content: bytes, request_id: str, stream: bool
    ) -> _Attempt:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.timeout_s):
                response = await pool.post(endpoint, content, {"x-request-id": request_id}, stream=stream)
                if stream and response.status == 200:
                    return await _read_stream(response.iter_body(), 200, started)
                # (a stream that is not a 200 carries an error body: read it whole)
                body = b"".join([c async for c in response.iter_body()]) if stream else response.body
                return _judge(response.status, body, response.headers)
        except TimeoutError:
            return _Attempt(error=f"timed out after {self.config.timeout_s:g} s", retryable=True)
        except fasthttp.TLSError as exc:
            return _Attempt(error=f"TLS failure: {exc}. {_TLS_HINT}")
        except fasthttp.TransportError as exc:
            return _Attempt(error=f"{type(exc).__name__}: {exc}", retryable=True)

    async def _attempt_httpx(self, endpoint: str, content: bytes, request_id: str, stream: bool) -> _Attempt:
        headers = {"x-request-id": request_id}
        # The caller holds a slot, so some shard has room (the shards' sizes add up to the slots).
        shard = max(range(len(self._free)), key=self._free.__getitem__)
        self._free[shard] -= 1
        http = self._shards[shard]
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.timeout_s):
                if not stream:
                    response = await http.post(endpoint, content=content, headers=headers)
                    return _judge(response.status_code, response.content, response.headers)
                async with http.stream("POST", endpoint, content=content, headers=headers) as response:
                    if response.status_code != 200:
                        return _judge(response.status_code, await response.aread(), response.headers)
                    return await _read_stream(response.aiter_raw(), response.status_code, started)
        except TimeoutError:
            return _Attempt(error=f"timed out after {self.config.timeout_s:g} s", retryable=True)
        except httpx.TimeoutException as exc:
            return _Attempt(error=f"{type(exc).__name__}: {exc or 'timed out'}", retryable=True)
        except httpx.TransportError as exc:
            if _is_tls_failure(exc):
                return _Attempt(error=f"TLS failure: {exc}. {_TLS_HINT}")
            retryable = isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError)
            return _Attempt(error=f"{type(exc).__name__}: {exc or 'connection failed'}", retryable=retryable)
        except httpx.HTTPError as exc:
            return _Attempt(error=f"{type(exc).__name__}: {exc}")
        finally:
            self._free[shard] += 1

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


def _ssl_context(verify: bool | str) -> ssl.SSLContext | bool:
    if verify is False:
        return False
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return httpx.create_ssl_context(trust_env=False)


def _no_verify_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _shard_sizes(concurrency: int) -> list[int]:
    full, rest = divmod(concurrency, POOL_SHARD)
    return [POOL_SHARD] * full + ([rest] if rest else [])


def _judge(status: int, body: bytes, headers: Mapping[str, str]) -> _Attempt:
    if 200 <= status < 300:
        return _Attempt(status=status, body=body)
    return _Attempt(
        status=status,
        body=body,
        error=f"HTTP {status}: {_error_message(body)}",
        retryable=status in RETRYABLE_STATUS,
        retry_after=parse_retry_after(headers.get("retry-after")) if status in RETRYABLE_STATUS else None,
    )


def _error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])[:500]
        if error is not None:
            return str(error)[:500]
    text = body[:200].decode("utf-8", "replace").strip()
    return text or "(empty body)"


async def _read_stream(chunks: AsyncIterator[bytes], status: int, started: float) -> _Attempt:
    assembler = StreamAssembler()
    ttft: float | None = None
    try:
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            async for data in chunks:
                assembler.feed(data)
                if ttft is None and assembler.first_token:
                    ttft = (time.perf_counter() - started) * 1000.0
        body = assembler.finish()
    except StreamError as exc:
        return _Attempt(status=status, body=assembler.error_body, error=f"stream: {exc}", ttft_ms=ttft)
    return _Attempt(status=status, body=body, ttft_ms=ttft)


def _is_tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
