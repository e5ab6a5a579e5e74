"""A vLLM-compatible HTTP server for tests, demos and benchmarks: plain asyncio, no dependencies.

It speaks HTTP/1.1 with keep-alive on `asyncio.Protocol` (a hand-written parser: requests with a
Content-Length body, which is what OpenAI clients send) because a server framework would cost more CPU per
request than the client under test; see docs/client-and-simulator.md for the measured rates.

Endpoints: POST /v1/chat/completions and /v1/completions (also `stream: true`, SSE), GET /v1/models, /health,
/health/json-schema, /version, /metrics (Prometheus text) and /openapi.json. Faults are drawn per completion
request with the configured rates (`Faults`), or forced by a request header (`x-dspark-fault: KIND` or
`KIND*N`: the first N attempts of a request, keyed by its `x-request-id`). Most break the transport or the
body; `refusal` and `ignore-schema` give a well-formed body with a wrong answer (`responses.ANSWER_FAULTS`).

How long a completion takes (`completion_delay_ms`): `latency_ms` (+- `jitter_ms`), or a lognormal draw with
median `latency_ms` and 99th percentile `latency_p99_ms`, plus `ms_per_token` for each completion token of the
body. With `capacity` N, at most N completions are served at once; one more is answered at once with 429 and
Retry-After, as a gateway or a hosted provider answers, and counted (`throttled` in stats and /metrics).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import socket
import ssl as ssl_module
import struct
import time
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from connector.errors import OptionsError
from connector.profiles import Profile, load_profile
from connector.simulator.prefix_cache import PrefixCache
from connector.simulator.responses import (
    ANSWER_FAULTS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODELS,
    GUIDED_FIELDS_UNTIL,
    BodyOptions,
    count_prompt_tokens,
    error_body,
    make_body,
    request_rng,
    stream_chunks,
    to_bytes,
)
from connector.types.json_types import json_type

__all__ = [
    "FAULT_KINDS",
    "LATENCY_DISTS",
    "Simulator",
    "SimulatorConfig",
    "completion_delay_ms",
    "latency_rng",
    "lognormal_ms",
    "parse_fault",
    "system_fingerprint",
]

# Every fault the simulator can inject, in the order they are drawn.
FAULT_KINDS = (
    "429",  # 429 Too Many Requests with Retry-After
    "500",  # 500 Internal Server Error (vLLM's error body)
    "502",  # 502 Bad Gateway (as a proxy in front of vLLM says it)
    "503",  # 503 Service Unavailable with Retry-After
    "504",  # 504 Gateway Timeout
    "slow",  # the response comes slow_ms late
    "hang",  # no response for hang_s (past any sensible client timeout), then the connection is closed
    "reset",  # the connection is reset (TCP RST) before any response
    "cut",  # headers announce the full body, the connection closes half way through it
    "truncate",  # 200 with the body cut half way (a consistent Content-Length); a stream stops without [DONE]
    "malformed",  # 200 with a body that is not JSON
    "invalid-utf8",  # 200 with invalid UTF-8 bytes inside the content string
    "big",  # 200 with a content of big_bytes
    "interim",  # interim 103 Early Hints and 100 Continue heads, then the real answer
    "flood",  # 200 with a chunked body of flood_bytes that never closes its JSON (a malicious server)
    "refusal",  # 200 whose chat choices refuse: `message.refusal` a sentence, `content` null, finish_reason 'stop'
    "ignore-schema",  # 200 whose JSON breaks the request's schema: a field missing, a wrong type, an extra field, a
    # string too long (drawn from the seed and the request)
)
SERVER_NAME = "dspark-vllm-simulator"
LATENCY_DISTS = ("fixed", "lognormal")
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile: NormalDist().inv_cdf(0.99)


def parse_fault(spec: str) -> tuple[str, float]:
    """'429=0.1' -> ('429', 0.1); the message names the fix."""
    kind, sep, rate_text = spec.partition("=")
    kind = kind.strip()
    if kind not in FAULT_KINDS:
        raise OptionsError(f"unknown fault {kind!r} in {spec!r}: use one of {', '.join(FAULT_KINDS)}")
    try:
        rate = float(rate_text) if sep else 1.0
    except ValueError:
        raise OptionsError(f"fault {spec!r}: the rate must be a number in [0, 1], as in {kind}=0.05") from None
    if not 0.0 <= rate <= 1.0:
        raise OptionsError(f"fault {spec!r}: the rate must be in [0, 1]")
    return kind, rate


def lognormal_ms(median_ms: float, p99_ms: float, rng: random.Random) -> float:
    """One draw of a lognormal with this median and 99th percentile: exp(N(ln median, sigma)), where
    sigma = ln(p99 / median) / z(0.99)."""
    sigma = math.log(p99_ms / median_ms) / _Z99
    return median_ms * math.exp(rng.gauss(0.0, sigma))


def latency_rng(seed: int, request: Mapping[str, Any] | bytes) -> random.Random:
    """The generator of a request's latency: a function of the seed and the request (its JSON, or its bytes
    when it is not JSON), so a retry of the same request takes as long; not shared with the body's."""
    key = request if isinstance(request, bytes) else json.dumps(request, sort_keys=True, default=str).encode()
    digest = hashlib.blake2b(f"{seed}|latency|".encode() + key, digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def completion_delay_ms(config: SimulatorConfig, rng: random.Random, completion_tokens: int = 0) -> float:
    """How long a completion takes before its answer, without faults: the base latency (fixed +- jitter, or a
    lognormal draw) plus `ms_per_token` x the tokens generated."""
    if config.latency_dist == "lognormal":
        assert config.latency_p99_ms is not None
        delay = lognormal_ms(config.latency_ms, config.latency_p99_ms, rng)
    else:
        delay = config.latency_ms
    if config.jitter_ms:
        delay = max(0.0, delay + (rng.random() * 2 - 1) * config.jitter_ms)
    return delay + config.ms_per_token * completion_tokens


@dataclass(frozen=True)
class SimulatorConfig:
    """How the simulator behaves. Every field is a `dspark-vllm simulate` option."""

    profiles: tuple[str, ...] = ("openai",)  # built-in names or files; one served model per profile
    models: tuple[str, ...] = ()  # model names, in the order of `profiles` (default: DEFAULT_MODELS)
    seed: int = 0
    latency_ms: float = 0.0  # added to every completion; with latency_dist 'lognormal', its median
    jitter_ms: float = 0.0  # +- uniform around latency_ms
    latency_dist: str = "fixed"  # 'fixed' (latency_ms +- jitter_ms) or 'lognormal'
    latency_p99_ms: float | None = None  # the lognormal's 99th percentile (needed with 'lognormal')
    ms_per_token: float = 0.0  # added per completion token of the body
    capacity: int | None = None  # completions served at once; beyond, 429 with Retry-After (None: no limit)
    itl_ms: float = 0.0  # delay between stream chunks
    prefix_cache_tokens: int = 0  # a prefix cache of this many tokens (prefix_cache.py); 0: none
    block_size: int = 16  # tokens of one of its blocks
    prefill_ms_per_token: float = 0.0  # added per prompt token not found in the prefix cache
    faults: Mapping[str, float] = field(default_factory=dict)  # kind -> rate
    retry_after_s: float = 1.0  # the Retry-After of 429 and 503
    slow_ms: float = 2000.0
    hang_s: float = 3600.0
    big_bytes: int = 4 * 1024 * 1024
    flood_bytes: int = 2 * 1024**3
    api_key: str | None = None  # like vllm --api-key: /v1/* then needs `Authorization: Bearer KEY`
    max_model_len: int = 8192
    metrics: bool = True  # per-request `metrics` in bodies (vllm --enable-per-request-metrics)
    version: str = "0.32.0"
    json_schema: bool = True  # serve /health/json-schema (False: like a plain vLLM)
    extra_fields: Mapping[str, Any] = field(default_factory=dict)  # added to every body and to the schema
    created: int | None = None  # fixed `created` (Unix s); None: the clock

    def __post_init__(self) -> None:
        if not self.profiles:
            raise OptionsError("the simulator needs at least one profile")
        if self.models and len(self.models) != len(self.profiles):
            raise OptionsError("give one --model per --profile, in the same order")
        for kind, rate in self.faults.items():
            if kind not in FAULT_KINDS:
                raise OptionsError(f"unknown fault {kind!r}: use one of {', '.join(FAULT_KINDS)}")
            if not 0.0 <= rate <= 1.0:
                raise OptionsError(f"fault {kind!r}: the rate must be in [0, 1], got {rate}")
        if sum(self.faults.values()) > 1.0 + 1e-9:
            raise OptionsError("the fault rates add up to more than 1")
        if self.latency_dist not in LATENCY_DISTS:
            raise OptionsError(
                f"unknown latency distribution {self.latency_dist!r}: use one of {', '.join(LATENCY_DISTS)}"
            )
        if self.latency_dist == "lognormal":
            if self.latency_ms <= 0:
                raise OptionsError("--latency-dist lognormal needs --latency-ms > 0 (the median)")
            if self.latency_p99_ms is None or self.latency_p99_ms <= self.latency_ms:
                raise OptionsError(
                    "--latency-dist lognormal needs --latency-p99-ms above --latency-ms (the median), "
                    "as in --latency-ms 200 --latency-p99-ms 5000"
                )
        elif self.latency_p99_ms is not None:
            raise OptionsError("--latency-p99-ms needs --latency-dist lognormal")
        if self.ms_per_token < 0:
            raise OptionsError(f"--ms-per-token must be at least 0, got {self.ms_per_token:g}")
        if self.capacity is not None and self.capacity < 1:
            raise OptionsError(f"--capacity must be at least 1, got {self.capacity} (leave it out for no limit)")
        if self.prefix_cache_tokens < 0 or self.block_size < 1 or self.prefill_ms_per_token < 0:
            raise OptionsError(
                "--prefix-cache-tokens and --prefill-ms-per-token must be at least 0, --block-size at least 1"
            )


@dataclass
class _Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class _Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Sequence[tuple[str, str]] = ()


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    502: "BadGateway",
    503: "ServiceUnavailableError",
    504: "GatewayTimeout",
}
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024
_INTERIM = b"HTTP/1.1 103 Early Hints\r\nlink: </v1/models>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
_FLOOD_BLOCK = b"x" * 65536


def _head(status: int, content_type: str, length: int | None, extra: Sequence[tuple[str, str]], close: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
        f"server: {SERVER_NAME}",
        f"content-type: {content_type}",
    ]
    lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
    lines.extend(f"{k}: {v}" for k, v in extra)
    if close:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, answers them in order (one at a time)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.task: asyncio.Task[None] | None = None
        self.transport: asyncio.Transport | None = None
        self._writable = asyncio.Event()  # cleared while the client reads slower than we write
        self._writable.set()

    # --- asyncio.Protocol --------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.sim.stats["connections_total"] += 1
        self.sim.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()
        self.sim.connections.discard(self)
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    # --- writing -----------------------------------------------
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def drain(self) -> None:
        """Wait until the client has taken what was written (large bodies: memory stays bounded here). It
        always yields to the loop, so that a client's hang-up is seen even when writing never pauses."""
        await asyncio.sleep(0)
        await self._writable.wait()

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def respond(self, response: _Response, request_id: str | None, close: bool) -> None:
        extra = list(response.headers)
        if request_id:
            extra.append(("x-request-id", request_id))
        self.sim.stats[f"status_{response.status}"] += 1
        self.write(_head(response.status, response.content_type, len(response.body), extra, close) + response.body)
        if close:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def reset(self) -> None:
        """Close with a TCP RST (SO_LINGER 0), as a crashed server or a middlebox does."""
        if self.transport is None or self.closed:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.closed = True
        self.transport.abort()

    # --- reading -----------------------------------------------
    def _process(self) -> None:
        while not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    self.respond(_Response(413, b'{"detail":"request head too large"}'), None, close=True)
                return
            try:
                lines = self.buf[:end].decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self.respond(_Response(400, b'{"detail":"malformed request"}'), None, close=True)
                return
            if "transfer-encoding" in headers:
                self.respond(_Response(411, b'{"detail":"send a Content-Length"}'), None, close=True)
                return
            if length > _MAX_BODY:
                self.respond(_Response(413, b'{"detail":"request body too large"}'), None, close=True)
                return
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            path, _, query = target.partition("?")
            close = version != "HTTP/1.1" or headers.get("connection", "").lower() == "close"
            request = _Request(method, path, query, headers, body)
            result = self.sim.dispatch(request, self)
            if isinstance(result, _Response):
                self.respond(result, headers.get("x-request-id"), close)
                continue
            self.busy = True
            self.task = asyncio.get_running_loop().create_task(self._finish(result, request, close))
            return

    async def _finish(self, pending: Awaitable[_Response | None], request: _Request, close: bool) -> None:
        self.sim.in_flight += 1
        self.sim.stats["in_flight_max"] = max(self.sim.stats["in_flight_max"], self.sim.in_flight)
        try:
            response = await pending
            if response is not None:
                self.respond(response, request.headers.get("x-request-id"), close)
            elif close:
                self.close()
        except asyncio.CancelledError:
            return
        finally:
            self.sim.in_flight -= 1
            self.busy = False
        if self.buf and not self.closed:
            self._process()


class Simulator:
    """The server: `await start(host, port)`, then `await close()`. `stats` counts what happened."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config or SimulatorConfig()
        self.profiles: dict[str, Profile] = {}
        for i, name in enumerate(self.config.profiles):
            profile = load_profile(name)
            model = self.config.models[i] if self.config.models else DEFAULT_MODELS.get(profile.name, profile.name)
            self.profiles[model] = profile
        self.default_model = next(iter(self.profiles))
        self.rng = random.Random(self.config.seed)
        # The counters /metrics always reports start at 0, so `stats` holds them before they move, as /metrics does.
        self.stats: Counter[str] = Counter(dict.fromkeys(("throttled", "connections_total", "in_flight_max"), 0))
        self.in_flight = 0
        self.serving = 0  # completions being served (what `capacity` bounds)
        self.connections: set[_Connection] = set()
        self.forced: Counter[str] = Counter()  # x-dspark-fault KIND*N: attempts seen per request id
        self.started = time.time()
        self._server: asyncio.base_events.Server | None = None
        self._configured()
        self.prefix_cache = PrefixCache(self.config.prefix_cache_tokens, self.config.block_size)
        self._routes: dict[tuple[str, str], Callable[[_Request], _Response]] = {
            ("GET", "/health"): lambda r: _Response(200, b"", "text/plain"),
            ("GET", "/health/json-schema"): self._json_schema,
            ("GET", "/version"): lambda r: self._json(200, {"version": self.config.version}),
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/openapi.json"): self._openapi,
        }

    def reconfigure(self, **changes: Any) -> None:
        """Change the configuration of a running simulator (tests: a new field, other faults)."""
        self.config = replace(self.config, **changes)
        self._configured()

    def _configured(self) -> None:
        self._fault_table = [(k, r) for k in FAULT_KINDS if (r := self.config.faults.get(k, 0.0)) > 0]
        old = _version(self.config.version) < (0, 10)
        self._guided_fields = _version(self.config.version) < GUIDED_FIELDS_UNTIL
        self._fingerprint = system_fingerprint(self.config.version, self.config.seed)
        self._reasoning_field = "reasoning_content" if old else "reasoning"

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        reuse_port: bool = False,
        ssl: ssl_module.SSLContext | None = None,
    ) -> tuple[str, int]:
        """Listen (HTTPS when `ssl` is given); returns the bound address."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), host, port, backlog=1024, reuse_port=reuse_port or None, ssl=ssl
        )
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            await self._server.wait_closed()

    # --- routing -----------------------------------------------
    @staticmethod
    def _json(status: int, payload: Any, headers: Sequence[tuple[str, str]] = ()) -> _Response:
        return _Response(status, to_bytes(payload), "application/json", headers)

    def _error(self, status: int, message: str, param: str | None = None) -> _Response:
        return self._json(status, error_body(message, _ERROR_TYPES.get(status, "Error"), status, param))

    def dispatch(self, request: _Request, conn: _Connection) -> _Response | Awaitable[_Response | None]:
        self.stats[f"requests {request.path}"] += 1
        key = self.config.api_key
        if (
            key is not None
            and request.path.startswith("/v1/")
            and request.headers.get("authorization") != (f"Bearer {key}")
        ):
            return self._json(401, {"error": "Unauthorized"})
        if request.path in ("/v1/chat/completions", "/v1/completions"):
            if request.method != "POST":
                return self._json(405, {"detail": "Method Not Allowed"})
            return self._completion(request, conn)
        route = self._routes.get((request.method, request.path))
        if route is not None:
            return route(request)
        if any(path == request.path for _, path in self._routes):
            return self._json(405, {"detail": "Method Not Allowed"})
        return self._json(404, {"detail": "Not Found"})

    def _profile_for(self, query: str) -> tuple[str, Profile]:
        for value in urllib.parse.parse_qs(query).get("model", ()):
            if value in self.profiles:
                return value, self.profiles[value]
        return self.default_model, self.profiles[self.default_model]

    def _json_schema(self, request: _Request) -> _Response:
        if not self.config.json_schema:
            return self._json(404, {"detail": "Not Found"})
        model, profile = self._profile_for(request.query)
        schema = profile.response_json_schema()
        for name, value in self.config.extra_fields.items():
            schema["properties"][name] = {"type": json_type(value)}
        schema["x-model"] = model
        schema["x-server"] = f"{SERVER_NAME} (vLLM {self.config.version} shape)"
        return self._json(200, schema)

    def _models(self, request: _Request) -> _Response:
        data = [
            {
                "id": model,
                "object": "model",
                "created": int(self.started),
                "owned_by": "vllm",
                "root": model,
                "parent": None,
                "max_model_len": self.config.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{i}",
                        "object": "model_permission",
                        "created": int(self.started),
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for i, model in enumerate(self.profiles)
        ]
        return self._json(200, {"object": "list", "data": data})

    def _metrics(self, request: _Request) -> _Response:
        s = self.stats
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
        ]
        lines += [f'vllm:num_requests_running{{model_name="{m}"}} {self.in_flight}' for m in self.profiles]
        lines += ["# TYPE dspark_sim_requests_total counter"]
        lines += [f'dspark_sim_requests_total{{path="{k[9:]}"}} {v}' for k, v in s.items() if k.startswith("requests ")]
        lines += ["# TYPE dspark_sim_responses_total counter"]
        lines += [
            f'dspark_sim_responses_total{{status="{k[7:]}"}} {v}' for k, v in s.items() if k.startswith("status_")
        ]
        lines += ["# TYPE dspark_sim_faults_total counter"]
        lines += [f'dspark_sim_faults_total{{kind="{k[6:]}"}} {v}' for k, v in s.items() if k.startswith("fault ")]
        lines += [
            "# HELP dspark_sim_throttled_total Completions answered 429 at once: --capacity of them were being served.",
            "# TYPE dspark_sim_throttled_total counter",
            f"dspark_sim_throttled_total {s['throttled']}",
            "# TYPE dspark_sim_serving gauge",
            f"dspark_sim_serving {self.serving}",
        ]
        if self.config.capacity is not None:
            lines += ["# TYPE dspark_sim_capacity gauge", f"dspark_sim_capacity {self.config.capacity}"]
        if self.config.prefix_cache_tokens:
            lines += self.prefix_cache.metrics(list(self.profiles))
        lines += [
            "# TYPE dspark_sim_connections_total counter",
            f"dspark_sim_connections_total {s['connections_total']}",
            "# TYPE dspark_sim_in_flight_max gauge",
            f"dspark_sim_in_flight_max {s['in_flight_max']}",
        ]
        return _Response(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")

    def _openapi(self, request: _Request) -> _Response:
        # Like vLLM's: request-side schemas and ErrorResponse; the 200 response schema is `{}`.
        ok = {
            "200": {"description": "Successful Response", "content": {"application/json": {"schema": {}}}},
            "400": {
                "description": "Bad Request",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
            },
        }
        message = {"type": "object", "properties": {"role": {"type": "string"}, "content": {}}}
        doc = {
            "openapi": "3.1.0",
            "info": {"title": "vLLM (dspark-vllm simulator)", "version": self.config.version},
            "paths": {
                "/v1/chat/completions": {
                    "post": {
                        "requestBody": {
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}
                            }
                        },
                        "responses": ok,
                    }
                },
                "/v1/completions": {
                    "post": {
                        "requestBody": {
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/CompletionRequest"}}
                            }
                        },
                        "responses": ok,
                    }
                },
            },
            "components": {
                "schemas": {
                    "ChatCompletionRequest": {
                        "type": "object",
                        "required": ["messages"],
                        "properties": {
                            "messages": {"type": "array", "items": message},
                            "model": {"type": "string"},
                            "max_tokens": {"type": "integer"},
                            "n": {"type": "integer"},
                            "stream": {"type": "boolean"},
                            "response_format": {"type": "object"},
                            "structured_outputs": {"type": "object"},
                            "seed": {"type": "integer"},
                        },
                    },
                    "CompletionRequest": {
                        "type": "object",
                        "required": ["prompt"],
                        "properties": {
                            "prompt": {},
                            "model": {"type": "string"},
                            "max_tokens": {"type": "integer"},
                            "n": {"type": "integer"},
                            "stream": {"type": "boolean"},
                            "structured_outputs": {"type": "object"},
                        },
                    },
                    "ErrorResponse": {
                        "type": "object",
                        "required": ["error"],
                        "properties": {
                            "error": {
                                "type": "object",
                                "properties": {
                                    "message": {"type": "string"},
                                    "type": {"type": "string"},
                                    "param": {},
                                    "code": {},
                                },
                            }
                        },
                    },
                }
            },
        }
        return self._json(200, doc)

    # --- completions -------------------------------------------
    def _draw_fault(self, request: _Request) -> str | None:
        forced = request.headers.get("x-dspark-fault")
        if forced:
            kind, _, times = forced.partition("*")
            if kind in FAULT_KINDS:
                if not times:
                    return kind
                key = f"{forced}|{request.headers.get('x-request-id') or request.body!r}"
                self.forced[key] += 1
                return kind if self.forced[key] <= int(times) else None
        if not self._fault_table:
            return None
        u = self.rng.random()
        for kind, rate in self._fault_table:
            if u < rate:
                return kind
            u -= rate
        return None

    def _bad_request(self, kind: str, loc: str, msg: str, items: int, extra: str = "") -> _Response:
        # vLLM 0.32's wording for a request that fails validation (pydantic, through FastAPI).
        message = (
            f"1 validation error:\n  {{'type': '{kind}', 'loc': '{loc}', 'msg': '{msg}', 'input': "
            f"'<dict of {items} items>'{extra}}}"
        )
        return self._json(400, error_body(message, "Bad Request", 400, loc))

    def _validate(self, request: _Request) -> tuple[dict[str, Any], dict[str, Any], Profile] | _Response:
        """The request as vLLM 0.32 checks it: its error messages, and `max_tokens` cut to what fits."""
        try:
            payload = json.loads(request.body)
        except (ValueError, UnicodeDecodeError) as exc:
            return self._bad_request(
                "json_invalid", "body.1", "JSON decode error", 0, f", 'ctx': {{'error': '{getattr(exc, 'msg', exc)}'}}"
            )
        if not isinstance(payload, dict):
            return self._bad_request("model_attributes_type", "body", "Input should be an object", 0)
        chat = request.path == "/v1/chat/completions"
        key = "messages" if chat else "prompt"
        if key not in payload:
            return self._bad_request("missing", f"body.{key}", "Field required", len(payload))
        if chat and not isinstance(payload[key], list):
            return self._bad_request("list_type", f"body.{key}", "Input should be a valid list", len(payload))
        model = payload.get("model") or self.default_model
        if model not in self.profiles:
            aliases = ", ".join(self.profiles)
            return self._error(404, f"The model `{model}` does not exist. Valid aliases: {aliases}.", "model")
        sent = payload
        payload = {**payload, "model": model}
        value = payload.get("n")
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return self._error(400, f"n must be at least 1, got {value}.")
        limit = self.config.max_model_len
        max_tokens = payload.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            return self._error(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        if max_tokens is not None and max_tokens > limit:
            return self._error(
                400,
                f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. Please request fewer "
                f"output tokens. (parameter=max_tokens, value={max_tokens})",
                "max_tokens",
            )
        prompt_tokens = count_prompt_tokens(payload)
        if prompt_tokens >= limit:
            return self._error(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
                f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. Please "
                f"reduce the length of the input prompt. (parameter=input_tokens, value={prompt_tokens})",
                "input_tokens",
            )
        # vLLM 0.32 cuts max_tokens to what is left of the context (checked), instead of refusing.
        payload["max_tokens"] = min(max_tokens or DEFAULT_MAX_TOKENS, limit - prompt_tokens)
        # The body's generator is seeded from the request as sent, before the defaults are filled in.
        return payload, sent, self.profiles[model]

    def _body(
        self, payload: dict[str, Any], sent: dict[str, Any], profile: Profile, fault: str | None = None
    ) -> dict[str, Any]:
        options = BodyOptions(
            created=self.config.created,
            metrics=self.config.metrics,
            reasoning_field=self._reasoning_field,
            system_fingerprint=self._fingerprint,
            guided_fields=self._guided_fields,
        )
        answer_fault = fault if fault in ANSWER_FAULTS else None
        body = make_body(request_rng(self.config.seed, sent), profile, payload, options, answer_fault)
        body.update(self.config.extra_fields)
        return body

    def _completion(self, request: _Request, conn: _Connection) -> _Response | Awaitable[_Response | None]:
        cfg = self.config
        if cfg.capacity is not None and self.serving >= cfg.capacity:
            # Refused before any work (no fault drawn, no latency), as a gateway in front of a full server does.
            self.stats["throttled"] += 1
            wait = _seconds(cfg.retry_after_s)
            message = f"Too many requests: the server serves {cfg.capacity} at once. Please retry after {wait} s."
            return self._json(429, error_body(message, _ERROR_TYPES[429], 429), [("retry-after", wait)])
        fault = self._draw_fault(request)
        if fault is not None:
            self.stats[f"fault {fault}"] += 1
        checked = self._validate(request)
        if isinstance(checked, _Response) and fault in (None, "slow"):
            return checked
        body: dict[str, Any] | None = None
        tokens = 0
        if cfg.ms_per_token and not isinstance(checked, _Response):
            body = self._body(*checked, fault)  # made first: its tokens set the delay
            tokens = int(body["usage"]["completion_tokens"])
        if cfg.latency_dist == "fixed":
            rng = self.rng  # the jitter draws from the server's sequence, as it always did
        else:
            rng = latency_rng(cfg.seed, request.body if isinstance(checked, _Response) else checked[1])
        delay = completion_delay_ms(cfg, rng, tokens)
        if cfg.prefix_cache_tokens and not isinstance(checked, _Response):
            cached = self.prefix_cache.lookup(checked[0])
            delay += cfg.prefill_ms_per_token * max(0, count_prompt_tokens(checked[0]) - cached)
        stream = not isinstance(checked, _Response) and bool(checked[0].get("stream"))
        if fault is None and delay == 0 and not stream:
            assert not isinstance(checked, _Response)
            return self._json(200, body if body is not None else self._body(*checked))
        # A task of its own, counted from now (not from its first step, one loop turn later, when more requests
        # may have come in): the place is freed when it ends, however it ends (a client that hangs up cancels it).
        task = asyncio.get_running_loop().create_task(
            self._slow_completion(request, conn, checked, fault, delay / 1000.0, stream, body)
        )
        self.serving += 1
        task.add_done_callback(self._served)
        return task

    def _served(self, task: asyncio.Task[_Response | None]) -> None:
        self.serving -= 1

    async def _slow_completion(
        self,
        request: _Request,
        conn: _Connection,
        checked: tuple[dict[str, Any], dict[str, Any], Profile] | _Response,
        fault: str | None,
        delay: float,
        stream: bool,
        body: dict[str, Any] | None = None,
    ) -> _Response | None:
        cfg = self.config
        if fault == "interim":
            conn.write(_INTERIM)
        if fault == "slow":
            delay += cfg.slow_ms / 1000.0
        if delay > 0:
            await asyncio.sleep(delay)
        if fault in ("429", "503"):
            return self._json(
                int(fault),
                error_body(_REASONS[int(fault)], _ERROR_TYPES[int(fault)], int(fault)),
                [("retry-after", _seconds(cfg.retry_after_s))],
            )
        if fault in ("500", "502", "504"):
            return self._error(int(fault), f"simulated {fault} ({_REASONS[int(fault)]})")
        if fault == "hang":
            await asyncio.sleep(cfg.hang_s)
            conn.close()
            return None
        if fault == "reset":
            conn.reset()
            return None
        if isinstance(checked, _Response):
            return checked
        if fault == "flood":
            await self._flood(request, conn, stream)
            return None
        payload, sent, profile = checked
        if body is None:
            body = self._body(payload, sent, profile, fault)
        if fault == "big":
            target = body["choices"][0].get("message", body["choices"][0])
            key = "content" if "message" in body["choices"][0] else "text"
            seed_text = (target.get(key) or "lorem ipsum ") + "\n"
            target[key] = (seed_text * (cfg.big_bytes // len(seed_text) + 1))[: cfg.big_bytes]
        if stream:
            await self._stream(request, conn, payload, body, fault)
            return None
        data = to_bytes(body)
        if fault == "truncate":
            data = data[: len(data) // 2]
        elif fault == "malformed":
            data = _malform(data, self.rng)
        elif fault == "invalid-utf8":
            data = _break_utf8(data)
        elif fault == "cut":
            conn.write(_head(200, "application/json", len(data), [], close=True) + data[: len(data) // 2])
            conn.reset()
            return None
        return _Response(200, data)

    async def _flood(self, request: _Request, conn: _Connection, stream: bool) -> None:
        """flood_bytes of content in one body that never ends its JSON, written as fast as the client reads."""
        opening = b'{"id":"chatcmpl-flood","object":"chat.completion","choices":[{"index":0,"message":{"content":"'
        if stream:
            opening = b"data: " + opening
        rid = request.headers.get("x-request-id")
        self.stats["status_200"] += 1
        conn.write(_head(200, "application/json", None, [("x-request-id", rid)] if rid else [], close=False))
        conn.write(b"%x\r\n%s\r\n" % (len(opening), opening))
        framed = b"%x\r\n%s\r\n" % (len(_FLOOD_BLOCK), _FLOOD_BLOCK)
        sent = 0
        try:
            while sent < self.config.flood_bytes:
                await conn.drain()
                if conn.closed or conn.transport is None or conn.transport.is_closing():
                    break
                conn.write(framed)
                sent += len(_FLOOD_BLOCK)
        finally:  # (a client that hangs up cancels this task)
            if sent < self.config.flood_bytes:
                self.stats["flood_aborted"] += 1
        conn.write(b"0\r\n\r\n")

    async def _stream(
        self,
        request: _Request,
        conn: _Connection,
        payload: dict[str, Any],
        body: dict[str, Any],
        fault: str | None,
    ) -> None:
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        chunks = stream_chunks(body, request_rng(self.config.seed + 1, payload), include_usage)
        events = [b"data: " + to_bytes(c) + b"\n\n" for c in chunks]
        done = True
        if fault in ("truncate", "cut"):
            events, done = events[: len(events) // 2], False
        elif fault == "malformed":
            events.insert(len(events) // 2, b'data: {"id": "chatcmpl-x", "choices": [\n\n')
        elif fault == "invalid-utf8":
            events.insert(len(events) // 2, b'data: {"choices":[{"index":0,"delta":{"content":"\xff\xfe"}}]}\n\n')
        if done:
            events.append(b"data: [DONE]\n\n")
        extra = [("cache-control", "no-cache")]
        rid = request.headers.get("x-request-id")
        if rid:
            extra.append(("x-request-id", rid))
        self.stats["status_200"] += 1
        conn.write(_head(200, "text/event-stream; charset=utf-8", None, extra, close=False))
        itl = self.config.itl_ms / 1000.0
        for event in events:
            if conn.closed:
                return
            conn.write(b"%x\r\n%s\r\n" % (len(event), event))
            if itl:
                await asyncio.sleep(itl)
        if fault == "cut":
            conn.reset()
            return
        conn.write(b"0\r\n\r\n")


def system_fingerprint(version: str, seed: int) -> str:
    """The `system_fingerprint` a simulator of this version and seed sends (vLLM: version and build hash)."""
    return f"vllm-{version}-{hashlib.blake2b(str(seed).encode(), digest_size=4).hexdigest()}"


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _seconds(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _malform(data: bytes, rng: random.Random) -> bytes:
    # Ways a broken proxy or a buggy server garbles JSON; the first bytes stay plausible.
    variant = int(rng.random() * 4)
    if variant == 0:
        return data[:-1] + b",}"  # trailing comma
    if variant == 1:
        return data.replace(b'"object":', b"object:", 1)  # unquoted key
    if variant == 2:
        return data + b"\n<html>502 Bad Gateway</html>"  # trailing garbage
    return data.replace(b'"choices":[', b'"choices":[[', 1)  # unbalanced brackets


def _break_utf8(data: bytes) -> bytes:
    # Invalid bytes inside a JSON string (the content), so only a UTF-8 check can see them.
    for key in (b'"content":"', b'"text":"', b'"model":"'):
        pos = data.find(key)
        if pos >= 0:
            pos += len(key)
            return data[:pos] + b"\xff\xfe\xc3(" + data[pos:]
    return data[:-1] + b'"\xff\xfe"}'
