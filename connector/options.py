"""The options of `'connector' = 'dspark-vllm'`: one typed table, validation, and the generated docs.

Modelled on flink-connector-kafka's `KafkaConnectorOptions`: kebab-case keys in dotted groups, typed values
(durations such as "30 s", enums as kebab-case strings), unknown keys rejected with Flink's own wording, and
rules across options as small named functions whose messages name the keys and the fix.

    >>> opts = validate({"connector": "dspark-vllm", "mode": "replay", "replay.path": "/data/bodies"})
    >>> opts.batch_size, opts.get(REQUEST_TIMEOUT)
    (10000, 60.0)
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast
from urllib.parse import urlsplit

from connector.client.params import REQUEST_PARAMS, check_params
from connector.errors import OptionsError

__all__ = [
    "CONNECTOR",
    "OPTIONS",
    "ConfigOption",
    "Options",
    "MODEL_OPTIONS",
    "RETIRED",
    "options_markdown",
    "retired",
    "parse_duration",
    "validate",
    "validate_model",
]

CONNECTOR = "dspark-vllm"
# Option keys the factory always accepts (Flink adds these two to every factory's list).
_FRAMEWORK_KEYS = ("connector", "property-version")


T = TypeVar("T")


@dataclass(frozen=True)
class ConfigOption(Generic[T]):
    """One option: its key, type, default and the sentence the docs show. Read it with `Options.get`."""

    key: str
    type: str  # string | int | double | boolean | duration | memory | list | enum | concurrency (an int or 'auto')
    description: str
    default: T | None = None
    required: bool = False
    values: tuple[str, ...] = ()  # for enums
    minimum: float | None = None
    maximum: float | None = None
    group: str = "General"
    secret: bool = False

    def parse(self, raw: str) -> T:
        text = str(raw).strip()
        try:
            if self.type == "int":
                value: Any = _integer(text)
            elif self.type == "concurrency":
                value = "auto" if text.lower() == "auto" else _integer(text)
            elif self.type == "double":
                if not _DECIMAL.match(text):
                    raise ValueError(text)
                value = float(text)
                if not math.isfinite(value):
                    raise ValueError(text)
            elif self.type == "boolean":
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                value = text.lower() == "true"
            elif self.type == "duration":
                value = parse_duration(text)
            elif self.type == "memory":
                value = parse_memory(text)
            elif self.type == "list":
                value = [item for item in str(raw).split(";") if item]
            elif self.type == "enum":
                if text.lower() not in self.values:
                    raise ValueError(text)
                value = text.lower()
            else:
                value = str(raw)
        except ValueError:
            raise OptionsError(
                f"Could not parse value '{raw}' for key '{self.key}'.\n\nExpected {self.expected}."
            ) from None
        if self.minimum is not None and not isinstance(value, str) and value < self.minimum:
            raise OptionsError(f"Option '{self.key}' must be >= {_fmt(self.minimum)}, got '{raw}'.")
        if self.maximum is not None and not isinstance(value, str) and value > self.maximum:
            limit = _fmt_duration(self.maximum) if self.type == "duration" else _fmt(self.maximum)
            raise OptionsError(f"Option '{self.key}' must be <= {limit}, got '{raw}'.")
        return cast(T, value)

    @property
    def expected(self) -> str:
        if self.type == "enum":
            return "one of " + ", ".join(f"'{v}'" for v in self.values)
        if self.type == "duration":
            return "a duration such as '30 s', '500 ms' or '2 min'"
        if self.type == "memory":
            return "a memory size such as '32 mb', '512 kb' or '1 gb'"
        if self.type == "concurrency":
            return "an integer or 'auto'"
        return {"int": "an integer", "double": "a number", "boolean": "'true' or 'false'"}.get(self.type, "text")

    @property
    def default_text(self) -> str:
        if self.default is None:
            return "(none)"
        if self.type == "duration":
            return _fmt_duration(float(cast(float, self.default)))
        if self.type == "memory":
            return _fmt_memory(int(cast(int, self.default)))
        if self.type == "boolean":
            return str(self.default).lower()
        return _fmt(self.default)


# Bounds the jar can hold: a Java long (every number's default maximum, `_option`), a Java int (the async
# operator's capacity, batch sizes).
_MAX_LONG = 2**63 - 1
_MAX_INT = 2**31 - 1


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_UNITS = {
    "ns": 1e-9, "nano": 1e-9, "nanos": 1e-9, "nanosecond": 1e-9, "nanoseconds": 1e-9,
    "us": 1e-6, "µs": 1e-6, "micro": 1e-6, "micros": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
    "ms": 1e-3, "milli": 1e-3, "millis": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "m": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}  # fmt: skip
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE)
# Numbers as Flink and Java read them: ASCII digits only (Python's int() and float() also take '1_0' and the
# digits of other scripts, which then meant something else, or nothing, on the JVM side).
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_DECIMAL = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")


def _integer(text: str) -> int:
    if not _INTEGER.match(text):
        raise ValueError(text)
    return int(text)


def parse_duration(text: str) -> float:
    """Flink's duration syntax ("30 s", "500ms", "2 min"; a bare number is milliseconds) -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(text)
    number, unit = match.groups()
    if not unit:
        return float(number) / 1000.0
    if unit.lower() not in _UNITS:
        raise ValueError(text)
    return float(number) * _UNITS[unit.lower()]


_MEMORY = re.compile(r"^\s*([0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)
_MEMORY_UNITS = {
    "": 1, "b": 1, "bytes": 1,
    "k": 1024, "kb": 1024, "kibibytes": 1024,
    "m": 1024**2, "mb": 1024**2, "mebibytes": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gibibytes": 1024**3,
}  # fmt: skip


def parse_memory(text: str) -> int:
    """Flink's memory size syntax ("32 mb", "512kb", "1 g"; units of 1024) -> bytes."""
    match = _MEMORY.match(text)
    if not match or match.group(2).lower() not in _MEMORY_UNITS:
        raise ValueError(text)
    return int(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()]


def _fmt_memory(size: int) -> str:
    for unit, factor in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} b"


def _fmt_duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)} {unit}"
    return f"{seconds} s"


# The most any duration may be: the JVM counts time in nanoseconds from an arbitrary origin (2^63 ns is 292
# years), and a longer deadline or wait overflowed there (every request failed at once).
DURATION_MAX_S = 365 * 86400.0


def _option(key: str, type_: str, description: str, **kwargs: Any) -> ConfigOption[Any]:
    """An option; a number or a duration not given a maximum gets what the jar can hold."""
    if type_ == "duration":
        kwargs.setdefault("maximum", DURATION_MAX_S)
    elif type_ in ("int", "concurrency"):
        kwargs.setdefault("maximum", _MAX_LONG)  # the jar reads numbers as Java longs: a larger one would wrap
    return ConfigOption(key=key, type=type_, description=description, **kwargs)


# Flink settings our Python functions depend on: set on this table's own operators (never the user's job).
BUNDLE_SIZE = "python.fn-execution.bundle.size"
BUNDLE_TIME = "python.fn-execution.bundle.time"
ARROW_BATCH = "python.fn-execution.arrow.batch.size"

# ---------------------------------------------------------------- general
CONNECTOR_OPTION: ConfigOption[str] = _option("connector", "string", "Must be 'dspark-vllm'.", required=True)
MODE: ConfigOption[str] = _option(
    "mode",
    "enum",
    "Where bodies come from: 'request' sends prompts to 'endpoint'; 'replay' reads captured raw bodies "
    "from 'replay.path'.",
    default="request",
    values=("request", "replay"),
)
PROFILE: ConfigOption[str] = _option(
    "profile",
    "string",
    "Model profile: a built-in name (openai, vl, coder, math) or the path of a profile file (.yaml).",
    default="openai",
)
MODEL: ConfigOption[str | None] = _option(
    "model",
    "string",
    "Model name sent in requests (required in request mode); it also fills the 'model' column of error rows.",
)
ENDPOINT: ConfigOption[str | None] = _option(
    "endpoint",
    "string",
    "Base URL of the OpenAI-compatible server, e.g. 'http://127.0.0.1:8000' (required in request mode).",
    group="Request",
)
API_KEY: ConfigOption[str | None] = _option(
    "api-key", "string", "API key sent as a bearer token. Never logged.", group="Request", secret=True
)
API_KEY_ENV: ConfigOption[str | None] = _option(
    "api-key.env",
    "string",
    "Name of the environment variable that holds the API key, read where the table is planned (SQL Client, "
    "Gateway, the job's main); the key travels in the job, not in the TaskManagers' environment.",
    group="Request",
)
API_KEY_FILE: ConfigOption[str | None] = _option(
    "api-key.file",
    "string",
    "A file that holds the API key (e.g. a mounted secret), read where the table is planned; the key travels in "
    "the job.",
    group="Request",
)
# ---------------------------------------------------------------- prompts (request mode)
PROMPTS_PATH: ConfigOption[str | None] = _option(
    "prompts.path", "string", "File or directory of prompts, one per line.", group="Prompts"
)
PROMPTS_RATE: ConfigOption[int | None] = _option(
    "prompts.rate",
    "int",
    "Send 'prompts.template' at this many prompts per second (load and health checks).",
    minimum=1,
    group="Prompts",
)
PROMPTS_TEMPLATE: ConfigOption[str] = _option(
    "prompts.template",
    "string",
    "Prompt sent with 'prompts.rate'; '{n}' is replaced by the prompt's sequence number.",
    default="Request {n}: answer briefly.",
    group="Prompts",
)
PROMPTS_COUNT: ConfigOption[int | None] = _option(
    "prompts.count",
    "int",
    "Number of prompts sent with 'prompts.rate' (unbounded when unset).",
    minimum=1,
    group="Prompts",
)
# ---------------------------------------------------------------- replay mode
REPLAY_PATH: ConfigOption[str | None] = _option(
    "replay.path",
    "string",
    "File or directory of captured raw response bodies, one per line.",
    group="Replay",
)
REPLAY_MONITOR_INTERVAL: ConfigOption[float | None] = _option(
    "replay.monitor-interval",
    "duration",
    "Watch 'replay.path' for new files at this interval (unbounded stream); read once when unset.",
    group="Replay",
)
# ---------------------------------------------------------------- requests
REQUEST_API: ConfigOption[str] = _option(
    "request.api",
    "enum",
    "Endpoint used: /v1/chat/completions or /v1/completions.",
    default="chat",
    values=("chat", "completions"),
    group="Request",
)
REQUEST_TIMEOUT: ConfigOption[float] = _option(
    "request.timeout",
    "duration",
    "Timeout of one attempt of one request (first byte sent to last byte read).",
    default=60.0,
    minimum=0.001,
    group="Request",
)
REQUEST_CONNECT_TIMEOUT: ConfigOption[float] = _option(
    "request.connect-timeout",
    "duration",
    "Longest wait for a connection.",
    default=10.0,
    minimum=0.001,
    group="Request",
)
REQUEST_CONCURRENCY: ConfigOption[int | str] = _option(
    "request.concurrency",
    "concurrency",
    "Requests on the wire at once per parallel instance: a number, or 'auto' to adapt it between "
    "'request.concurrency.min' and 'request.concurrency.max' (AIMD: lower on 429/503 answers or climbing latency, "
    "higher again while answers are fine; docs/flink.md).",
    default=64,
    minimum=1,
    maximum=65536,
    group="Request",
)
REQUEST_CONCURRENCY_MIN: ConfigOption[int] = _option(
    "request.concurrency.min",
    "int",
    "With 'request.concurrency' = 'auto': the fewest requests on the wire at once.",
    default=1,
    minimum=1,
    maximum=65536,
    group="Request",
)
REQUEST_CONCURRENCY_MAX: ConfigOption[int] = _option(
    "request.concurrency.max",
    "int",
    "With 'request.concurrency' = 'auto': the most requests on the wire at once (and where it starts from: 16, "
    "or this when smaller).",
    default=256,
    minimum=1,
    maximum=65536,
    group="Request",
)
REQUEST_QUEUE_SIZE: ConfigOption[int | None] = _option(
    "request.queue-size",
    "int",
    "Prompts the request step holds at once per parallel instance (on the wire, waiting for a slot, in backoff), "
    "all in its checkpoint state; unset: 4 x 'request.concurrency' (or its max). While it has room a checkpoint "
    "waits for no request; when it is full the prompts' source is held back and a checkpoint waits for the next "
    "response (docs/flink.md).",
    minimum=1,
    maximum=1_000_000,
    group="Request",
)
REQUEST_OUTPUT_MODE: ConfigOption[str] = _option(
    "request.output-mode",
    "enum",
    "'unordered': rows leave as their responses complete (a slow request holds back no other row; no row "
    "overtakes a watermark); 'ordered': rows leave in the order of their prompts.",
    default="unordered",
    values=("unordered", "ordered"),
    group="Request",
)
REQUEST_RATE_LIMIT: ConfigOption[float | None] = _option(
    "request.rate-limit",
    "double",
    "Requests per second per parallel instance (no limit when unset).",
    minimum=0.001,
    group="Request",
)
REQUEST_MAX_BODY_SIZE: ConfigOption[int] = _option(
    "request.max-body-size",
    "memory",
    "A larger response is not read: its connection is closed and the prompt becomes an error row (too-large). "
    "At most 256 mb, the largest body the parser reads (docs/json.md).",
    default=32 * 1024**2,
    minimum=1024,
    maximum=256 * 1024**2,
    group="Request",
)
REQUEST_STRUCTURED_OUTPUT: ConfigOption[bool] = _option(
    "request.structured-output",
    "boolean",
    "Send the profile's content schema as response_format (json_schema) so the model writes JSON.",
    default=False,
    group="Request",
)
REQUEST_TLS_VERIFY: ConfigOption[bool] = _option(
    "request.tls-verify", "boolean", "Verify the server's TLS certificate.", default=True, group="Request"
)
REQUEST_TLS_CA_BUNDLE: ConfigOption[str | None] = _option(
    "request.tls-ca-bundle",
    "string",
    "PEM file of the CAs to trust instead of the public ones (a private CA), on the TaskManagers.",
    group="Request",
)
REQUEST_TLS_CLIENT_CERT: ConfigOption[str | None] = _option(
    "request.tls-client-cert", "string", "PEM certificate shown to a server that asks for one.", group="Request"
)
REQUEST_TLS_CLIENT_KEY: ConfigOption[str | None] = _option(
    "request.tls-client-key", "string", "Its private key, when in a separate file.", group="Request"
)
REQUEST_STORE: ConfigOption[str | None] = _option(
    "request.store",
    "string",
    "Where every completed response is kept before its row leaves the request step: a folder of Flink's file "
    "systems (e.g. 's3://bucket/responses', 'file:///data/responses') or a Kafka topic "
    "('kafka://host:9092,host2:9092/topic', Kafka client settings after '?'); a restarted job answers from it what "
    "was answered before the failure instead of paying for it again (docs/flink.md, 'No answer paid for twice').",
    group="Request",
)
REQUEST_CACHE: ConfigOption[float | None] = _option(
    "request.cache",
    "duration",
    "Answer a request from 'request.store' when an identical one (same endpoint and body) was answered within "
    "this time; sound only where the answer is a function of the request (temperature 0 or a seed).",
    minimum=0.001,
    group="Request",
)
RETRY_ON_FAILURE: ConfigOption[str] = _option(
    "request.on-failure",
    "enum",
    "What a request that failed for good becomes: 'error-row' (a row with 'error.reason' set, the job goes on) or "
    "'fail-job' (the job fails, then restarts from its last checkpoint by its restart strategy).",
    default="error-row",
    values=("error-row", "fail-job"),
    group="Retry",
)
# ---------------------------------------------------------------- request body parameters (vLLM's names)
_PARAM_TYPES = {"int": "int", "float": "double", "bool": "boolean", "list[str]": "list"}
REQUEST_PARAM_OPTIONS: dict[str, ConfigOption[Any]] = {
    name: _option(
        "request." + name.replace("_", "-"),
        _PARAM_TYPES[param.type],
        f"{param.description} Sent as '{name}'" + ("; a list separated by ';'." if param.type == "list[str]" else "."),
        group="Request body",
    )
    for name, param in REQUEST_PARAMS.items()
}
# ---------------------------------------------------------------- retries and outages
RETRY_DEADLINE: ConfigOption[float] = _option(
    "request.retry.deadline",
    "duration",
    "Most time one request may take: attempts, backoff and waits while the server is down; after it the prompt "
    "becomes an error row. The default rides out a server restart of a few minutes.",
    default=300.0,
    minimum=0.001,
    group="Retry",
)
RETRY_MAX_ATTEMPTS: ConfigOption[int | None] = _option(
    "request.retry.max-attempts",
    "int",
    "Most attempts per request (1 = no retry); unset, as many as fit in 'request.retry.deadline'. Retried: "
    "connect errors, timeouts, broken connections, 408, 429 (Retry-After honoured) and 502/503/504.",
    minimum=1,
    maximum=_MAX_INT,
    group="Retry",
)
RETRY_INITIAL_BACKOFF: ConfigOption[float] = _option(
    "request.retry.initial-backoff", "duration", "First backoff step.", default=0.5, minimum=0.0, group="Retry"
)
RETRY_MAX_BACKOFF: ConfigOption[float] = _option(
    "request.retry.max-backoff",
    "duration",
    "Largest backoff step, and the probe interval while the server is down.",
    default=10.0,
    minimum=0.0,
    group="Retry",
)
RETRY_MAX_RETRY_AFTER: ConfigOption[float] = _option(
    "request.retry.max-retry-after",
    "duration",
    "A longer Retry-After header is cut to this.",
    default=60.0,
    minimum=0.0,
    group="Retry",
)
RETRY_HOLD_WHILE_DOWN: ConfigOption[bool] = _option(
    "request.retry.hold-while-down",
    "boolean",
    "Hold new requests back while the server cannot be reached (back-pressure) instead of spending their "
    "attempts; a probe of /health or a request that gets through opens the way again.",
    default=True,
    group="Retry",
)
# ---------------------------------------------------------------- parsing
PARSE_BACKEND: ConfigOption[str] = _option(
    "parse.backend",
    "enum",
    "Deserializer backend: 'gpu' (libcudf), 'cpu' (the native simdjson core) or 'auto' (gpu when available, else cpu).",
    default="auto",
    values=("auto", "cpu", "gpu"),
    group="Parse",
)
PARSE_BATCH_SIZE: ConfigOption[int | None] = _option(
    "parse.batch-size",
    "int",
    "Bodies parsed per batch (the Arrow batch of the vectorized function); unset: 10000 in replay mode, 1000 in "
    "request mode. "
    "A batch holds its bodies in memory three times over (JVM, Arrow, Python): keep batch size x largest body x 3 "
    "well inside the TaskManager's memory (2 MB bodies in a 2 GB TaskManager: 100-200).",
    minimum=1,
    maximum=1_000_000,
    group="Parse",
)
PARSE_GPU_DEVICE: ConfigOption[str] = _option(
    "parse.gpu-device",
    "string",
    "CUDA device of each parallel instance: 'auto' (device 0 of CUDA_VISIBLE_DEVICES when one is "
    "visible, else subtask index modulo the visible devices) or a device number.",
    default="auto",
    group="Parse",
)
# ---------------------------------------------------------------- Flink settings of this table's own operators
BUNDLE_SIZE_OPTION: ConfigOption[int | None] = _option(
    BUNDLE_SIZE,
    "int",
    "Flink: elements per Python bundle of this table's parse function (default: parse.batch-size in request "
    "mode, 5 x parse.batch-size in replay mode).",
    minimum=1,
    maximum=_MAX_INT,
    group="Flink",
)
BUNDLE_TIME_OPTION: ConfigOption[float] = _option(
    BUNDLE_TIME,
    "duration",
    "Flink: longest time a Python bundle of this table's functions stays open (default: 1 s in replay mode, "
    "20 ms in request mode).",
    default=1.0,
    minimum=0.001,
    group="Flink",
)
ARROW_BATCH_OPTION: ConfigOption[int | None] = _option(
    ARROW_BATCH,
    "int",
    "Flink: rows per Arrow batch of this table's parse function (default: parse.batch-size).",
    minimum=1,
    maximum=_MAX_INT,
    group="Flink",
)

OPTIONS: tuple[ConfigOption[Any], ...] = (
    CONNECTOR_OPTION,
    MODE,
    PROFILE,
    MODEL,
    ENDPOINT,
    API_KEY,
    API_KEY_ENV,
    API_KEY_FILE,
    PROMPTS_PATH,
    PROMPTS_RATE,
    PROMPTS_TEMPLATE,
    PROMPTS_COUNT,
    REPLAY_PATH,
    REPLAY_MONITOR_INTERVAL,
    REQUEST_API,
    REQUEST_TIMEOUT,
    REQUEST_CONNECT_TIMEOUT,
    REQUEST_CONCURRENCY,
    REQUEST_CONCURRENCY_MIN,
    REQUEST_CONCURRENCY_MAX,
    REQUEST_QUEUE_SIZE,
    REQUEST_OUTPUT_MODE,
    REQUEST_RATE_LIMIT,
    REQUEST_MAX_BODY_SIZE,
    REQUEST_STRUCTURED_OUTPUT,
    REQUEST_TLS_VERIFY,
    REQUEST_TLS_CA_BUNDLE,
    REQUEST_TLS_CLIENT_CERT,
    REQUEST_TLS_CLIENT_KEY,
    REQUEST_STORE,
    REQUEST_CACHE,
    *REQUEST_PARAM_OPTIONS.values(),
    RETRY_DEADLINE,
    RETRY_MAX_ATTEMPTS,
    RETRY_INITIAL_BACKOFF,
    RETRY_MAX_BACKOFF,
    RETRY_MAX_RETRY_AFTER,
    RETRY_HOLD_WHILE_DOWN,
    RETRY_ON_FAILURE,
    PARSE_BACKEND,
    PARSE_BATCH_SIZE,
    PARSE_GPU_DEVICE,
    BUNDLE_SIZE_OPTION,
    BUNDLE_TIME_OPTION,
    ARROW_BATCH_OPTION,
)

# ---------------------------------------------------------------- CREATE MODEL ... WITH ('provider' = 'dspark-vllm')
PROVIDER_OPTION: ConfigOption[str] = _option(
    "provider", "string", "Must be 'dspark-vllm'.", required=True, group="Model"
)
PROMPT_TEMPLATE: ConfigOption[str | None] = _option(
    "prompt.template",
    "string",
    "The user message of each request, made from the row: '{column}' is replaced by that INPUT column's value "
    "('{{' and '}}' for braces). Unset: the one STRING INPUT column that is not a request body option.",
    group="Model",
)
SYSTEM_PROMPT: ConfigOption[str | None] = _option(
    "system-prompt", "string", "A system message sent before the user message of each request.", group="Model"
)
MODEL_ONLY: tuple[ConfigOption[Any], ...] = (PROVIDER_OPTION, PROMPT_TEMPLATE, SYSTEM_PROMPT)
# The table's options a model takes, with the same keys and defaults: what a request is and how it is sent. Not
# the prompt sources (the rows of ML_PREDICT's input are the prompts), replay, the output mode and the queue
# (ML_PREDICT's own 'output-mode' and 'max-concurrent-operations'), nor the Python operators' settings.
_NOT_FOR_MODELS = (MODE, REQUEST_OUTPUT_MODE, REQUEST_QUEUE_SIZE, PARSE_GPU_DEVICE)
MODEL_OPTIONS: tuple[ConfigOption[Any], ...] = (
    PROVIDER_OPTION,
    *(
        o
        for o in OPTIONS
        if o.group in ("General", "Request", "Request body", "Retry", "Parse")
        and not o.required
        and o not in _NOT_FOR_MODELS
    ),
    PROMPT_TEMPLATE,
    SYSTEM_PROMPT,
)

# ---------------------------------------------------------------- retired keys
# What replaced prompts from another table (issue 27): ML_PREDICT over that table keeps every column of the rows
# that asked, where the table kept one. A key here is refused with its one line, before any other check (the jar's
# factory says it too: TableOptions.RETIRED, generated from this); a key ending in '.' is a family of keys.
ML_PREDICT_INSTEAD = (
    "read them with a table of their own connector and ask the model with ML_PREDICT over it, which keeps every "
    "column of the rows that asked (CREATE MODEL ... WITH ('provider' = 'dspark-vllm'); docs/flink.md, "
    "\"Enrichment: ML_PREDICT with a 'dspark-vllm' model\")"
)
RETIRED: dict[str, str] = {
    "prompts.source.": (
        f"Option 'prompts.source.*' is retired: for prompts from another connector, {ML_PREDICT_INSTEAD}."
    ),
    "prompts.column": (
        "Option 'prompts.column' is retired with 'prompts.source.*': name the prompt column in ML_PREDICT's "
        f"DESCRIPTOR(column); for prompts from another connector, {ML_PREDICT_INSTEAD}."
    ),
}


def retired(key: str) -> str | None:
    """The one line that says what replaced a retired key, or None for a key that is not retired."""
    return next((m for k, m in RETIRED.items() if (key.startswith(k) if k.endswith(".") else key == k)), None)


_BY_KEY = {o.key: o for o in OPTIONS}
REQUEST_ONLY = tuple(o for o in OPTIONS if o.group in ("Prompts", "Request", "Request body", "Retry"))
REPLAY_ONLY = tuple(o for o in OPTIONS if o.group == "Replay")


def _option_of(key: str) -> ConfigOption[Any] | None:
    return _BY_KEY.get(key)


@dataclass(frozen=True)
class Options:
    """Validated options, read through typed accessors: `options.get(MODE)`; defaults filled in."""

    parsed: Mapping[str, Any]
    given: frozenset[str] = field(default_factory=frozenset)
    raw: Mapping[str, str] = field(default_factory=dict, repr=False)

    def get(self, option: ConfigOption[T]) -> T:
        return cast(T, self.parsed[option.key])

    def is_set(self, option: ConfigOption[Any]) -> bool:
        return option.key in self.given

    @property
    def batch_size(self) -> int:
        # Replay: large batches, the parser's fixed costs spread thin. Request mode: a bundle no longer waits for
        # requests (they run on the JVM's async I/O), only for the parse of what has arrived; bundles end by
        # 'python.fn-execution.bundle.time' long before 1000 responses arrive at most rates, and large responses
        # (logprobs) stay bounded in memory.
        configured = self.get(PARSE_BATCH_SIZE)
        if configured:
            return int(configured)
        return 1000 if self.get(MODE) == "request" else 10000

    @property
    def bundle_size(self) -> int:
        configured = self.get(BUNDLE_SIZE_OPTION)
        if configured:
            return configured
        if self.get(MODE) == "request":
            return self.batch_size
        # Replay: PyFlink's operator waits for a bundle's results before it sends more, so a bundle of one batch
        # makes the JVM and Python take turns; five let the JVM read and send while Python parses
        # (docs/benchmarks.md, "The Flink paths"). `bundle.time` (1 s) still ends each bundle.
        return 5 * self.batch_size

    @property
    def bundle_time(self) -> float:
        """Seconds a Python bundle stays open: as set, else 1 s in replay mode and 20 ms in request mode, where a
        response waits in the open bundle before its row goes on (the latency the table adds; docs/flink.md)."""
        if self.is_set(BUNDLE_TIME_OPTION):
            return float(self.get(BUNDLE_TIME_OPTION))
        return 0.02 if self.get(MODE) == "request" else 1.0

    @property
    def queue_size(self) -> int:
        """Prompts the request step holds at once: as set, else 4 x the most requests on the wire."""
        configured = self.get(REQUEST_QUEUE_SIZE)
        return int(configured) if configured else 4 * self.concurrency[2]

    @property
    def concurrency(self) -> tuple[int, int, int, bool]:
        """(start, min, max, adaptive) of the requests on the wire per instance."""
        value = self.get(REQUEST_CONCURRENCY)
        if value == "auto":
            high = self.get(REQUEST_CONCURRENCY_MAX)
            low = min(self.get(REQUEST_CONCURRENCY_MIN), high)
            return max(low, min(16, high)), low, high, True
        fixed = int(value)
        return fixed, fixed, fixed, False

    @property
    def arrow_batch_size(self) -> int:
        # Unset, it follows parse.batch-size, but never past the bundle (which caps it anyway).
        return self.get(ARROW_BATCH_OPTION) or min(self.batch_size, self.bundle_size)

    def without_secrets(self) -> dict[str, str]:
        """The options as given, less the secret ones (the API key): for a place that needs none of them."""
        return {k: v for k, v in self.raw.items() if (o := _option_of(k)) is None or not o.secret}

    def public(self) -> dict[str, str]:
        """The options as given, secrets masked: for logs and plans."""
        return {k: ("******" if (o := _option_of(k)) is not None and o.secret else v) for k, v in self.raw.items()}


# ---------------------------------------------------------------- rules across options
Rule = Callable[[Options], None]


def _given(options: Options, *keys: ConfigOption[Any]) -> list[ConfigOption[Any]]:
    return [k for k in keys if options.is_set(k)]


def _named(option: ConfigOption[Any]) -> str:
    return f"'{option.key}'"


def rule_mode_request_needs_endpoint_and_model(o: Options) -> None:
    if o.get(MODE) != "request":
        return
    for option, example in ((ENDPOINT, "'http://127.0.0.1:8000'"), (MODEL, "the served model's name")):
        if not o.is_set(option):
            raise OptionsError(f"Option '{option.key}' is required when 'mode' = 'request'; set it to {example}.")


def rule_one_prompt_source(o: Options) -> None:
    sources = _given(o, PROMPTS_PATH, PROMPTS_RATE)
    if len(sources) > 1:
        quoted = " and ".join(_named(k) for k in sources)
        raise OptionsError(f"Option {quoted} shouldn't be set together; keep one source of prompts.")
    if o.get(MODE) == "request" and not sources:
        raise OptionsError(
            "One of 'prompts.path' or 'prompts.rate' is required when 'mode' = 'request' (prompts from another "
            f"table: {ML_PREDICT_INSTEAD})."
        )


def rule_rate_options_need_rate(o: Options) -> None:
    for option in _given(o, PROMPTS_TEMPLATE, PROMPTS_COUNT):
        if not o.is_set(PROMPTS_RATE):
            raise OptionsError(f"Option '{option.key}' needs 'prompts.rate'; set it or remove '{option.key}'.")


def rule_mode_replay_needs_path(o: Options) -> None:
    if o.get(MODE) == "replay" and not o.is_set(REPLAY_PATH):
        raise OptionsError("Option 'replay.path' is required when 'mode' = 'replay'.")


def rule_options_fit_mode(o: Options) -> None:
    wrong = REQUEST_ONLY if o.get(MODE) == "replay" else REPLAY_ONLY
    other = "request" if o.get(MODE) == "replay" else "replay"
    for option in _given(o, *wrong):
        raise OptionsError(
            f"Option {_named(option)} has no effect when 'mode' = '{o.get(MODE)}'; remove it or set 'mode' = '{other}'."
        )


def rule_one_api_key(o: Options) -> None:
    given = _given(o, API_KEY, API_KEY_ENV, API_KEY_FILE)
    if len(given) > 1:
        quoted = " and ".join(f"'{k.key}'" for k in given)
        raise OptionsError(f"Option {quoted} shouldn't be set together; keep one.")


# A host name the jar's java.net.URI reads as a host (it takes one with '_' for a registry-based authority).
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def _endpoint_problem(endpoint: str) -> str | None:
    """Why the jar's request step could not use `endpoint` (java.net.URI, then a connection), or None."""
    if not re.match(r"^https?://[^/\s]+", endpoint) or any(c.isspace() for c in endpoint):
        return "it is not an http(s) URL"
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "its host or port cannot be read (a port is a number from 1 to 65535; an IPv6 address is in [])"
    if "?" in endpoint or "#" in endpoint:
        return "the request paths are added to it, so it takes no query ('?') or fragment ('#')"
    if "@" in parts.netloc:
        return "it holds a user name or password: give the key with 'api-key', 'api-key.env' or 'api-key.file'"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"its host '{host}' is not an IPv6 address"
    elif not _HOST_NAME.match(host):
        return f"its host '{host}' is not a host name or an IP address (letters, digits, '-' and '.'; no '_')"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    return None


def rule_endpoint_is_url(o: Options) -> None:
    endpoint = o.get(ENDPOINT)
    problem = None if endpoint is None else _endpoint_problem(endpoint)
    if problem is not None:
        raise OptionsError(
            f"Option 'endpoint' must be an http(s) URL such as 'http://127.0.0.1:8000', got '{endpoint}': {problem}."
        )


def rule_gpu_device(o: Options) -> None:
    device = str(o.get(PARSE_GPU_DEVICE))
    if device != "auto" and not (device.isascii() and device.isdigit()):
        raise OptionsError(f"Option 'parse.gpu-device' must be 'auto' or a device number, got '{device}'.")


def rule_concurrency_bounds(o: Options) -> None:
    if o.get(REQUEST_CONCURRENCY) != "auto":
        for option in _given(o, REQUEST_CONCURRENCY_MIN, REQUEST_CONCURRENCY_MAX):
            raise OptionsError(
                f"Option '{option.key}' needs 'request.concurrency' = 'auto'; set it or remove '{option.key}'."
            )
    elif o.get(REQUEST_CONCURRENCY_MIN) > o.get(REQUEST_CONCURRENCY_MAX):
        raise OptionsError(
            f"Option 'request.concurrency.min' ({o.get(REQUEST_CONCURRENCY_MIN)}) is larger than "
            f"'request.concurrency.max' ({o.get(REQUEST_CONCURRENCY_MAX)}); lower the one or raise the other."
        )


def rule_queue_holds_the_requests_on_the_wire(o: Options) -> None:
    if o.get(MODE) != "request":
        return
    _, _, most, _ = o.concurrency
    if o.queue_size < most:
        key = "request.concurrency.max" if o.get(REQUEST_CONCURRENCY) == "auto" else "request.concurrency"
        raise OptionsError(
            f"Option 'request.queue-size' ({o.get(REQUEST_QUEUE_SIZE)}) is smaller than '{key}' ({most}), the "
            f"requests on the wire it must hold; raise 'request.queue-size' or lower '{key}'."
        )


def rule_request_params_are_valid(o: Options) -> None:
    for name, option in REQUEST_PARAM_OPTIONS.items():
        value = o.get(option)
        if value is not None:
            try:
                check_params({name: value})
            except OptionsError:
                rule = REQUEST_PARAMS[name].rule
                raise OptionsError(f"Option '{option.key}' must be {rule}, got '{o.raw[option.key]}'.") from None


def rule_attempt_fits_deadline(o: Options) -> None:
    if o.get(MODE) == "request" and o.get(REQUEST_TIMEOUT) > o.get(RETRY_DEADLINE):
        raise OptionsError(
            "Option 'request.timeout' is longer than 'request.retry.deadline', which ends every request: lower "
            "'request.timeout' or raise 'request.retry.deadline'."
        )


def rule_tls_files(o: Options) -> None:
    if o.is_set(REQUEST_TLS_CA_BUNDLE) and not o.get(REQUEST_TLS_VERIFY):
        raise OptionsError(
            "Option 'request.tls-ca-bundle' has no effect with 'request.tls-verify' = 'false'; remove one of them."
        )
    if o.is_set(REQUEST_TLS_CLIENT_KEY) and not o.is_set(REQUEST_TLS_CLIENT_CERT):
        raise OptionsError("Option 'request.tls-client-key' needs 'request.tls-client-cert'; set it or remove the key.")


def rule_cache_needs_store(o: Options) -> None:
    if o.is_set(REQUEST_CACHE) and not o.is_set(REQUEST_STORE):
        raise OptionsError(
            "Option 'request.cache' answers from the responses kept in 'request.store'; set 'request.store' to a "
            "folder (e.g. 'file:///data/responses') or remove 'request.cache'."
        )


def rule_arrow_batch_within_bundle(o: Options) -> None:
    batch = o.get(ARROW_BATCH_OPTION)
    if batch is not None and batch > o.bundle_size:
        raise OptionsError(
            f"Option '{ARROW_BATCH}' ({batch}) is larger than '{BUNDLE_SIZE}' ({o.bundle_size}), which caps it; "
            f"raise '{BUNDLE_SIZE}' or lower '{ARROW_BATCH}'."
        )


RULES: tuple[Rule, ...] = (
    rule_mode_request_needs_endpoint_and_model,
    rule_mode_replay_needs_path,
    rule_one_prompt_source,
    rule_rate_options_need_rate,
    rule_options_fit_mode,
    rule_one_api_key,
    rule_endpoint_is_url,
    rule_gpu_device,
    rule_concurrency_bounds,
    rule_queue_holds_the_requests_on_the_wire,
    rule_request_params_are_valid,
    rule_attempt_fits_deadline,
    rule_tls_files,
    rule_arrow_batch_within_bundle,
    rule_cache_needs_store,
)


def validate(raw: Mapping[str, str]) -> Options:
    """Check a table's WITH options the way Flink's FactoryUtil does, then the rules across options."""
    for key in sorted(raw):
        if (message := retired(key)) is not None:
            raise OptionsError(message)
    unknown = sorted(k for k in raw if _option_of(k) is None and k not in _FRAMEWORK_KEYS)
    if unknown:
        # Flink's wording, but the nearest keys to each unknown one instead of all ~60 (a misspelt key is the
        # usual cause, and the list hid the one meant).
        supported = sorted({*(o.key for o in OPTIONS), *_FRAMEWORK_KEYS})
        named = []
        for key in unknown:
            near = difflib.get_close_matches(key, supported, n=3, cutoff=0.6)
            named.append(f"{key} (did you mean {' or '.join(near)}?)" if near else key)
        raise OptionsError(
            f"Unsupported options found for '{CONNECTOR}'.\n\n"
            "Unsupported options:\n\n" + "\n".join(named) + "\n\n"
            f"Supported options: {len(supported)} keys, in the README's table of options "
            "(connector.options.OPTIONS)."
        )
    missing = sorted(o.key for o in OPTIONS if o.required and o.key not in raw)
    if missing:
        raise OptionsError(
            "One or more required options are missing.\n\nMissing required options are:\n\n" + "\n".join(missing)
        )
    if raw["connector"] != CONNECTOR:
        raise OptionsError(f"Option 'connector' must be '{CONNECTOR}', got '{raw['connector']}'.")
    values = {o.key: (o.parse(raw[o.key]) if o.key in raw else o.default) for o in OPTIONS}
    options = Options(parsed=values, given=frozenset(raw), raw=dict(raw))
    for rule in RULES:
        rule(options)
    return options


# The rules across options that hold for a model too (a model has no prompt source, replay or Python operator).
MODEL_RULES: tuple[Rule, ...] = (
    rule_mode_request_needs_endpoint_and_model,
    rule_one_api_key,
    rule_endpoint_is_url,
    rule_concurrency_bounds,
    rule_request_params_are_valid,
    rule_attempt_fits_deadline,
    rule_tls_files,
    rule_cache_needs_store,
)


def validate_model(raw: Mapping[str, str]) -> Options:
    """Check a model's WITH options (`CREATE MODEL ... WITH ('provider' = 'dspark-vllm', ...)`) as `validate` checks
    a table's: the same keys and defaults for what they share, Flink's wording for unknown keys."""
    known = {o.key: o for o in MODEL_OPTIONS}
    unknown = sorted(k for k in raw if k not in known)
    if unknown:
        raise OptionsError(
            f"Unsupported options found for model provider '{CONNECTOR}'.\n\n"
            "Unsupported options:\n\n" + "\n".join(unknown) + "\n\n"
            "Supported options:\n\n" + "\n".join(sorted(known))
        )
    if raw.get("provider") != CONNECTOR:
        raise OptionsError(f"Option 'provider' must be '{CONNECTOR}', got '{raw.get('provider')}'.")
    values = {o.key: o.default for o in (*OPTIONS, *MODEL_ONLY)}
    values.update({k: known[k].parse(v) for k, v in raw.items()})
    options = Options(parsed=values, given=frozenset(raw), raw=dict(raw))
    for rule in MODEL_RULES:
        rule(options)
    return options


def options_markdown(options: tuple[ConfigOption[Any], ...] | None = None) -> str:
    """The options table as Markdown (the README's 'Table options' section is generated from this; with
    `MODEL_OPTIONS`, docs/flink.md's model options)."""
    lines = ["| Key | Required | Default | Type | Description |", "|---|---|---|---|---|"]
    group = None
    for o in OPTIONS if options is None else options:
        if o.group != group:
            group = o.group
            lines.append(f"| **{group}** | | | | |")
        kind = o.type if o.type != "enum" else "enum: " + " \\| ".join(o.values)
        required = "yes" if o.required else "no"
        description = o.description.replace("|", "\\|")
        lines.append(f"| `{o.key}` | {required} | `{o.default_text}` | {kind} | {description} |")
    return "\n".join(lines) + "\n"


def options_java() -> str:
    """`io.dspark.vllm.flink.TableOptions`: the keys of `OPTIONS` as Flink ConfigOptions, for the factory's
    `optionalOptions()` and Flink's own check of the keys (`FactoryUtil`). Generated: `python -m
    connector.options --java FILE`; tests/test_options.py fails when the file is stale. Values stay strings
    there: their types, defaults and the rules across options are checked by `validate`, through the planner."""

    def literal(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [
        "package io.dspark.vllm.flink;",
        "",
        "import org.apache.flink.configuration.ConfigOption;",
        "import org.apache.flink.configuration.ConfigOptions;",
        "",
        "import java.util.Arrays;",
        "import java.util.Collections;",
        "import java.util.LinkedHashMap;",
        "import java.util.LinkedHashSet;",
        "import java.util.Map;",
        "import java.util.Set;",
        "",
        "/** GENERATED by {@code python -m connector.options --java}: do not edit. The options of 'dspark-vllm'. */",
        "final class TableOptions {",
        "    private TableOptions() {}",
        "",
        "    /** Retired keys and the one line that says what replaced each (a key ending in '.' is a family). */",
        "    static final Map<String, String> RETIRED = retiredKeys();",
        "",
        "    private static Map<String, String> retiredKeys() {",
        "        Map<String, String> retired = new LinkedHashMap<>();",
        *(f"        retired.put({literal(k)}, {literal(m)});" for k, m in RETIRED.items()),
        "        return Collections.unmodifiableMap(retired);",
        "    }",
        "",
        "    /** What replaced a retired key ({@code connector.options.retired}), or null. */",
        "    static String retired(String key) {",
        "        for (Map.Entry<String, String> e : RETIRED.entrySet()) {",
        "            String k = e.getKey();",
        '            if (k.endsWith(".") ? key.startsWith(k) : key.equals(k)) {',
        "                return e.getValue();",
        "            }",
        "        }",
        "        return null;",
        "    }",
        "",
        "    static final Set<ConfigOption<?>> OPTIONAL =",
        "            Collections.unmodifiableSet(new LinkedHashSet<>(Arrays.asList(",
    ]
    keyed = [o for o in OPTIONS if not o.required]
    for i, o in enumerate(keyed):
        end = "" if i == len(keyed) - 1 else ","
        lines.append(
            f"            ConfigOptions.key({literal(o.key)}).stringType().noDefaultValue()"
            f".withDescription({literal(o.description)}){end}"
        )
    lines += [
        "    )));",
        "",
        "    /** The keys of a model ('provider' = 'dspark-vllm'): connector.options.MODEL_OPTIONS. */",
        "    static final Set<String> MODEL_KEYS = Collections.unmodifiableSet(new LinkedHashSet<>(Arrays.asList(",
    ]
    model = [o.key for o in MODEL_OPTIONS]
    for start in range(0, len(model), 4):
        end = "" if start + 4 >= len(model) else ","
        lines.append("            " + ", ".join(literal(k) for k in model[start : start + 4]) + end)
    lines += ["    )));", "}", ""]
    return "\n".join(lines)


def update_docs(path: str) -> bool:
    """Rewrite the block between `<!-- options:start -->` and `<!-- options:end -->` in `path` (and the model's,
    between `<!-- model-options:start -->` and `<!-- model-options:end -->`, where the file has them)."""
    from pathlib import Path

    doc = Path(path)
    text = doc.read_text(encoding="utf-8")
    new = text
    for name, table in (("options", options_markdown()), ("model-options", options_markdown(MODEL_OPTIONS))):
        start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
        if start not in new or end not in new:
            if name == "options":
                raise OptionsError(f"{path}: add the markers {start.strip()} and {end} where the table belongs")
            continue
        head, rest = new.split(start, 1)
        new = head + start + table + end + rest.split(end, 1)[1]
    doc.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--update"] and len(sys.argv) == 3:
        print(f"{sys.argv[2]}: {'updated' if update_docs(sys.argv[2]) else 'up to date'}")
    elif sys.argv[1:2] == ["--java"] and len(sys.argv) == 3:
        from pathlib import Path

        Path(sys.argv[2]).write_text(options_java(), encoding="utf-8")
    else:
        sys.stdout.write(options_markdown())
