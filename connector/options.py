"""The options of `'connector' = 'dspark-vllm'`: one typed table, validation, and the generated docs.

Modelled on flink-connector-kafka's `KafkaConnectorOptions`: kebab-case keys in dotted groups, typed values
(durations such as "30 s", enums as kebab-case strings), unknown keys rejected with Flink's own wording, and
rules across options as small named functions whose messages name the keys and the fix.

    >>> opts = validate({"connector": "dspark-vllm", "mode": "replay", "replay.path": "/data/bodies"})
    >>> opts["parse.batch-size"], opts["request.timeout"]
    (10000, 60.0)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from connector.errors import OptionsError

__all__ = [
    "CONNECTOR",
    "OPTIONS",
    "ConfigOption",
    "Options",
    "options_markdown",
    "parse_duration",
    "validate",
]

CONNECTOR = "dspark-vllm"
# Option keys the factory always accepts (Flink adds these two to every factory's list).
_FRAMEWORK_KEYS = ("connector", "property-version")


@dataclass(frozen=True)
class ConfigOption:
    """One option: its key, type, default and the sentence the docs show."""

    key: str
    type: str  # string | int | double | boolean | duration | enum
    description: str
    default: Any = None
    required: bool = False
    values: tuple[str, ...] = ()  # for enums
    minimum: float | None = None
    group: str = "General"
    secret: bool = False

    def parse(self, raw: str) -> Any:
        text = str(raw).strip()
        try:
            if self.type == "int":
                value: Any = int(text)
            elif self.type == "double":
                value = float(text)
            elif self.type == "boolean":
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                value = text.lower() == "true"
            elif self.type == "duration":
                value = parse_duration(text)
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
        if self.minimum is not None and value < self.minimum:
            raise OptionsError(f"Option '{self.key}' must be >= {_fmt(self.minimum)}, got '{raw}'.")
        return value

    @property
    def expected(self) -> str:
        if self.type == "enum":
            return "one of " + ", ".join(f"'{v}'" for v in self.values)
        if self.type == "duration":
            return "a duration such as '30 s', '500 ms' or '2 min'"
        return {"int": "an integer", "double": "a number", "boolean": "'true' or 'false'"}.get(self.type, "text")

    @property
    def default_text(self) -> str:
        if self.default is None:
            return "(none)"
        if self.type == "duration":
            return _fmt_duration(self.default)
        if self.type == "boolean":
            return str(self.default).lower()
        return _fmt(self.default)


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
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE)


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


def _fmt_duration(seconds: float) -> str:
    for unit, size in (("min", 60.0), ("s", 1.0), ("ms", 1e-3)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)} {unit}"
    return f"{seconds} s"


def _option(key: str, type_: str, description: str, **kwargs: Any) -> ConfigOption:
    return ConfigOption(key=key, type=type_, description=description, **kwargs)


# The Flink settings our functions depend on: applied to the job's configuration unless the user set them.
BUNDLE_SIZE = "python.fn-execution.bundle.size"
BUNDLE_TIME = "python.fn-execution.bundle.time"
ARROW_BATCH = "python.fn-execution.arrow.batch.size"

OPTIONS: tuple[ConfigOption, ...] = (
    # ---------------------------------------------------------------- general
    _option("connector", "string", "Must be 'dspark-vllm'.", required=True),
    _option(
        "mode",
        "enum",
        "Where bodies come from: 'request' sends prompts to 'endpoint'; 'replay' reads captured raw bodies "
        "from 'replay.path'.",
        default="request",
        values=("request", "replay"),
    ),
    _option(
        "profile",
        "string",
        "Model profile: a built-in name (openai, vl, coder, math) or the path of a profile file (.yaml).",
        default="openai",
    ),
    _option(
        "model",
        "string",
        "Model name sent in requests (required in request mode); in replay mode it labels rows whose body "
        "could not be read.",
    ),
    _option(
        "endpoint",
        "string",
        "Base URL of the OpenAI-compatible server, e.g. 'http://127.0.0.1:8000' (required in request mode).",
        group="Request",
    ),
    _option("api-key", "string", "API key sent as a bearer token. Never logged.", group="Request", secret=True),
    _option("api-key.env", "string", "Name of the environment variable that holds the API key.", group="Request"),
    # ---------------------------------------------------------------- prompts (request mode)
    _option(
        "prompts.table",
        "string",
        "Table whose rows are the prompts: a STRING column 'prompt' (see 'prompts.column'), optionally a "
        "STRING column 'request_id'.",
        group="Prompts",
    ),
    _option(
        "prompts.column",
        "string",
        "Column of 'prompts.table' that holds the prompt.",
        default="prompt",
        group="Prompts",
    ),
    _option("prompts.path", "string", "File or directory of prompts, one per line.", group="Prompts"),
    _option(
        "prompts.rate",
        "int",
        "Send 'prompts.template' at this many prompts per second (load and health checks).",
        minimum=1,
        group="Prompts",
    ),
    _option(
        "prompts.template",
        "string",
        "Prompt sent with 'prompts.rate'; '{n}' is replaced by the prompt's sequence number.",
        default="Request {n}: answer briefly.",
        group="Prompts",
    ),
    _option(
        "prompts.count",
        "int",
        "Number of prompts sent with 'prompts.rate' (unbounded when unset).",
        minimum=1,
        group="Prompts",
    ),
    # ---------------------------------------------------------------- replay mode
    _option(
        "replay.path",
        "string",
        "File or directory of captured raw response bodies, one per line.",
        group="Replay",
    ),
    _option(
        "replay.monitor-interval",
        "duration",
        "Watch 'replay.path' for new files at this interval (unbounded stream); read once when unset.",
        group="Replay",
    ),
    # ---------------------------------------------------------------- requests
    _option(
        "request.api",
        "enum",
        "Endpoint used: /v1/chat/completions or /v1/completions.",
        default="chat",
        values=("chat", "completions"),
        group="Request",
    ),
    _option(
        "request.timeout",
        "duration",
        "Timeout of one attempt of one request.",
        default=60.0,
        minimum=0.001,
        group="Request",
    ),
    _option(
        "request.max-retries",
        "int",
        "Retries on connect errors, timeouts, 429 and 502/503/504.",
        default=3,
        minimum=0,
        group="Request",
    ),
    _option(
        "request.concurrency",
        "int",
        "Requests in flight per parallel instance (the async I/O capacity).",
        default=64,
        minimum=1,
        group="Request",
    ),
    _option(
        "request.rate-limit",
        "double",
        "Requests per second per parallel instance (no limit when unset).",
        minimum=0.001,
        group="Request",
    ),
    _option(
        "request.max-tokens",
        "int",
        "max_tokens sent with each request (server default when unset).",
        minimum=1,
        group="Request",
    ),
    _option(
        "request.structured-output",
        "boolean",
        "Send the profile's content schema as response_format (json_schema) so the model writes JSON.",
        default=False,
        group="Request",
    ),
    _option("request.tls-verify", "boolean", "Verify the server's TLS certificate.", default=True, group="Request"),
    _option(
        "request.engine",
        "enum",
        "HTTP engine of the client: 'httpx' (httpx.AsyncClient) or 'asyncio' (the client's own HTTP/1.1 on asyncio "
        "streams: ~10x less CPU per request, no proxies).",
        default="httpx",
        values=("httpx", "asyncio"),
        group="Request",
    ),
    # ---------------------------------------------------------------- parsing
    _option(
        "parse.backend",
        "enum",
        "Deserializer backend: 'gpu' (cuDF), 'cpu' (pyarrow) or 'auto' (gpu when available, else cpu).",
        default="auto",
        values=("auto", "cpu", "gpu"),
        group="Parse",
    ),
    _option(
        "parse.batch-size",
        "int",
        "Bodies parsed per batch (the Arrow batch of the vectorized function).",
        default=10000,
        minimum=1,
        group="Parse",
    ),
    _option(
        "parse.gpu-device",
        "string",
        "CUDA device of each parallel instance: 'auto' (device 0 of CUDA_VISIBLE_DEVICES when one is "
        "visible, else subtask index modulo the visible devices) or a device number.",
        default="auto",
        group="Parse",
    ),
    # ---------------------------------------------------------------- errors
    _option(
        "errors.table",
        "string",
        "Name of the table that receives rejected bodies and failed requests (default: '<table>_errors').",
        group="Errors",
    ),
    # ---------------------------------------------------------------- Flink settings our layer sets
    _option(
        BUNDLE_SIZE,
        "int",
        "Flink: elements per Python bundle; caps the async requests in flight (default: parse.batch-size).",
        minimum=1,
        group="Flink",
    ),
    _option(
        BUNDLE_TIME,
        "duration",
        "Flink: longest time a Python bundle stays open.",
        default=1.0,
        minimum=0.001,
        group="Flink",
    ),
    _option(
        ARROW_BATCH,
        "int",
        "Flink: rows per Arrow batch of vectorized functions (default: parse.batch-size).",
        minimum=1,
        group="Flink",
    ),
)

_BY_KEY = {o.key: o for o in OPTIONS}
REQUEST_ONLY = ("endpoint", "api-key", "api-key.env") + tuple(
    o.key for o in OPTIONS if o.group in ("Prompts", "Request")
)
REPLAY_ONLY = tuple(o.key for o in OPTIONS if o.group == "Replay")


@dataclass(frozen=True)
class Options(Mapping[str, Any]):
    """Validated options: every key of `OPTIONS`, parsed to its type, defaults filled in."""

    parsed: Mapping[str, Any]
    given: frozenset[str] = field(default_factory=frozenset)

    def __getitem__(self, key: str) -> Any:
        return self.parsed[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.parsed)

    def __len__(self) -> int:
        return len(self.parsed)

    def is_set(self, key: str) -> bool:
        return key in self.given

    @property
    def bundle_size(self) -> int:
        return int(self.parsed[BUNDLE_SIZE] or self.parsed["parse.batch-size"])

    @property
    def arrow_batch_size(self) -> int:
        # Unset, it follows parse.batch-size, but never past the bundle (which caps it anyway).
        return int(self.parsed[ARROW_BATCH] or min(self.parsed["parse.batch-size"], self.bundle_size))


# ---------------------------------------------------------------- rules across options
Rule = Callable[[Mapping[str, Any], frozenset[str]], None]


def _given(given: frozenset[str], *keys: str) -> list[str]:
    return [k for k in keys if k in given]


def rule_mode_request_needs_endpoint_and_model(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    if opts["mode"] != "request":
        return
    for key, example in (("endpoint", "'http://127.0.0.1:8000'"), ("model", "the served model's name")):
        if key not in given:
            raise OptionsError(f"Option '{key}' is required when 'mode' = 'request'; set it to {example}.")


def rule_one_prompt_source(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    sources = _given(given, "prompts.table", "prompts.path", "prompts.rate")
    if len(sources) > 1:
        quoted = " and ".join(f"'{k}'" for k in sources)
        raise OptionsError(f"Option {quoted} shouldn't be set together; keep one source of prompts.")
    if opts["mode"] == "request" and not sources:
        raise OptionsError(
            "One of 'prompts.table', 'prompts.path' or 'prompts.rate' is required when 'mode' = 'request'."
        )


def rule_rate_options_need_rate(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    for key in _given(given, "prompts.template", "prompts.count"):
        if "prompts.rate" not in given:
            raise OptionsError(f"Option '{key}' needs 'prompts.rate'; set it or remove '{key}'.")
    if "prompts.column" in given and "prompts.table" not in given:
        raise OptionsError("Option 'prompts.column' needs 'prompts.table'; set it or remove 'prompts.column'.")


def rule_mode_replay_needs_path(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    if opts["mode"] == "replay" and "replay.path" not in given:
        raise OptionsError("Option 'replay.path' is required when 'mode' = 'replay'.")


def rule_options_fit_mode(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    wrong = REQUEST_ONLY if opts["mode"] == "replay" else REPLAY_ONLY
    other = "request" if opts["mode"] == "replay" else "replay"
    for key in _given(given, *wrong):
        raise OptionsError(
            f"Option '{key}' has no effect when 'mode' = '{opts['mode']}'; remove it or set 'mode' = '{other}'."
        )


def rule_one_api_key(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    if "api-key" in given and "api-key.env" in given:
        raise OptionsError("Option 'api-key' and 'api-key.env' shouldn't be set together; keep one.")


def rule_endpoint_is_url(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    endpoint = opts.get("endpoint")
    if endpoint is not None and not re.match(r"^https?://[^/\s]+", endpoint):
        raise OptionsError(
            f"Option 'endpoint' must be an http(s) URL such as 'http://127.0.0.1:8000', got '{endpoint}'."
        )


def rule_gpu_device(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    device = str(opts["parse.gpu-device"])
    if device != "auto" and not device.isdigit():
        raise OptionsError(f"Option 'parse.gpu-device' must be 'auto' or a device number, got '{device}'.")


def rule_bundle_holds_requests(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    # PyFlink's async I/O keeps at most one bundle of elements in flight.
    bundle = opts[BUNDLE_SIZE] or opts["parse.batch-size"]
    if opts["mode"] == "request" and opts["request.concurrency"] > bundle:
        raise OptionsError(
            f"Option 'request.concurrency' ({opts['request.concurrency']}) is larger than "
            f"'{BUNDLE_SIZE}' ({bundle}), which caps the requests in flight; raise '{BUNDLE_SIZE}' or "
            "lower 'request.concurrency'."
        )


def rule_arrow_batch_within_bundle(opts: Mapping[str, Any], given: frozenset[str]) -> None:
    bundle = opts[BUNDLE_SIZE] or opts["parse.batch-size"]
    batch = opts[ARROW_BATCH]
    if batch is not None and batch > bundle:
        raise OptionsError(
            f"Option '{ARROW_BATCH}' ({batch}) is larger than '{BUNDLE_SIZE}' ({bundle}), which caps it; "
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
    rule_bundle_holds_requests,
    rule_arrow_batch_within_bundle,
)


def validate(raw: Mapping[str, str]) -> Options:
    """Check a table's WITH options the way Flink's FactoryUtil does, then the rules across options."""
    unknown = sorted(k for k in raw if k not in _BY_KEY and k not in _FRAMEWORK_KEYS)
    if unknown:
        supported = sorted({*_BY_KEY, *_FRAMEWORK_KEYS})
        raise OptionsError(
            f"Unsupported options found for '{CONNECTOR}'.\n\n"
            "Unsupported options:\n\n" + "\n".join(unknown) + "\n\n"
            "Supported options:\n\n" + "\n".join(supported)
        )
    missing = sorted(o.key for o in OPTIONS if o.required and o.key not in raw)
    if missing:
        raise OptionsError(
            "One or more required options are missing.\n\nMissing required options are:\n\n" + "\n".join(missing)
        )
    if raw["connector"] != CONNECTOR:
        raise OptionsError(f"Option 'connector' must be '{CONNECTOR}', got '{raw['connector']}'.")
    values = {o.key: (o.parse(raw[o.key]) if o.key in raw else o.default) for o in OPTIONS}
    given = frozenset(raw)
    for rule in RULES:
        rule(values, given)
    return Options(parsed=values, given=given)


def options_markdown() -> str:
    """The options table as Markdown (the README's 'Table options' section is generated from this)."""
    lines = ["| Key | Required | Default | Type | Description |", "|---|---|---|---|---|"]
    group = None
    for o in OPTIONS:
        if o.group != group:
            group = o.group
            lines.append(f"| **{group}** | | | | |")
        kind = o.type if o.type != "enum" else "enum: " + " \\| ".join(o.values)
        required = "yes" if o.required else "no"
        description = o.description.replace("|", "\\|")
        lines.append(f"| `{o.key}` | {required} | `{o.default_text}` | {kind} | {description} |")
    return "\n".join(lines) + "\n"


def update_docs(path: str) -> bool:
    """Rewrite the block between `<!-- options:start -->` and `<!-- options:end -->` in `path`."""
    from pathlib import Path

    doc = Path(path)
    text = doc.read_text(encoding="utf-8")
    start, end = "<!-- options:start -->\n", "<!-- options:end -->"
    if start not in text or end not in text:
        raise OptionsError(f"{path}: add the markers {start.strip()} and {end} where the table belongs")
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    new = head + start + options_markdown() + end + tail
    doc.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--update"] and len(sys.argv) == 3:
        print(f"{sys.argv[2]}: {'updated' if update_docs(sys.argv[2]) else 'up to date'}")
    else:
        sys.stdout.write(options_markdown())
