"""Every option of a 'dspark-vllm' table and model, declared once: keys, types, defaults, descriptions,
groups; the model's keys; the retired keys and what replaced each."""

from __future__ import annotations

from typing import Any

from connector.options.types import (
    _MAX_INT,
    ARROW_BATCH,
    BUNDLE_SIZE,
    BUNDLE_TIME,
    ConfigOption,
    _option,
)
from connector.params import REQUEST_PARAMS

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
    "Base URL of the OpenAI-compatible server, e.g. 'http://127.0.0.1:8000' (required in request mode); several "
    "separated by commas are replicas, and a host name that resolves to several addresses (a headless Kubernetes "
    "Service) is one replica per address: each with its own connections, concurrency and health (docs/flink.md, "
    "'Replicas and routing').",
    group="Request",
)
API_KEY: ConfigOption[str | None] = _option(
    "api-key",
    "string",
    "API key sent as a bearer token. Never logged, but Flink's catalog keeps it as written: SHOW CREATE TABLE and "
    "SHOW CREATE MODEL print it; prefer 'api-key.file' or 'api-key.env'.",
    group="Request",
    secret=True,
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
    "File or directory of captured raw response bodies, one per line (a file is read whole by one task: give "
    "several files to read them in parallel).",
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
    "Requests on the wire at once per parallel instance and replica: a number, or 'auto' to adapt it between "
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
    "or this when smaller, shared by the parallel instances: each starts at its share).",
    default=256,
    minimum=1,
    maximum=65536,
    group="Request",
)
REQUEST_QUEUE_SIZE: ConfigOption[int | None] = _option(
    "request.queue-size",
    "int",
    "Prompts the request step holds at once per parallel instance (on the wire, waiting for a slot, in backoff), "
    "all in its checkpoint state; unset: 4 x 'request.concurrency' (or its max) for each URL in 'endpoint'. While it "
    "has room a checkpoint "
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
REQUEST_ROUTING: ConfigOption[str] = _option(
    "request.routing",
    "enum",
    "Which replica takes a request: 'least-loaded' (the most free slots) or 'prefix' (prompts that share their "
    "first 'request.routing.prefix-length' bytes go to the same replica, so its prefix cache is hit; each replica "
    "an even share of the heads, by hashing; a replica that stays overloaded or is ejected passes them on to the "
    "next).",
    default="least-loaded",
    values=("least-loaded", "prefix"),
    group="Request",
)
REQUEST_ROUTING_PREFIX_LENGTH: ConfigOption[int] = _option(
    "request.routing.prefix-length",
    "int",
    "With 'request.routing' = 'prefix': the bytes of a request's messages (system prompt first) that choose its "
    "replica; about the length of the head that prompts share.",
    default=256,
    minimum=1,
    maximum=1_000_000,
    group="Request",
)
REQUEST_ROUTING_LOAD_BOUND: ConfigOption[float] = _option(
    "request.routing.load-bound",
    "double",
    "With 'request.routing' = 'prefix': a replica keeps a request of its heads while it has a free slot, or its "
    "load (requests on the wire and waiting for it) is at most this times the mean load (+1), or has been over "
    "that for under a second; a replica that stays over it passes its newest waiting requests on to the next "
    "replica in their head's order; higher keeps more heads on their replica (more prefix cache hits) at the cost "
    "of an even load.",
    default=1.25,
    minimum=1.0,
    maximum=1000.0,
    group="Request",
)
REQUEST_ROUTING_KEY_COLUMN: ConfigOption[str | None] = _option(
    "request.routing.key-column",
    "string",
    "A model's, with 'request.routing' = 'prefix': the INPUT column (e.g. a session or user id) whose value, as "
    "text, chooses a row's replica instead of its messages' head, so that all rows of one value go to the replica "
    "that holds their conversation's prefix (same hashing and load bound); a NULL value goes by the head. A "
    "'dspark-vllm' table has no INPUT columns and refuses it.",
    group="Request",
)
REQUEST_REPLICAS_RESOLVE_INTERVAL: ConfigOption[float] = _option(
    "request.replicas.resolve-interval",
    "duration",
    "A host name in 'endpoint' is looked up again at this interval: addresses that appear become replicas, those "
    "gone are dropped; 0: never (the name is one replica, connected as the JVM resolves it).",
    default=30.0,
    minimum=0.0,
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
# ---------------------------------------------------------------- answer fields (connector.types.answer)
ANSWER_CONSTRAINT: ConfigOption[str] = _option(
    "answer.constraint",
    "enum",
    "With answer fields (declared columns that are neither profile columns nor metadata keys), how the server "
    "is held to their JSON Schema: 'response-format' sends it as response_format json_schema (strict), "
    "'structured-outputs' as vLLM's own structured_outputs, 'prompt' only as an instruction in the prompt "
    "(servers without structured outputs). Each answer is checked against the schema either way.",
    default="response-format",
    values=("response-format", "structured-outputs", "prompt"),
    group="Answer",
)
ANSWER_STRING_CHARACTERS: ConfigOption[str] = _option(
    "answer.string-characters",
    "enum",
    "The characters an answer's strings may hold (their schema's pattern): 'all' but the control characters, or "
    "'safe': ASCII, U+00A0-U+07FF, U+1000-U+D7FF and U+E000-U+FFFD, which vLLM's xgrammar backend constrains "
    "exactly (for the others it can write bytes that are not UTF-8: such an answer is an error row).",
    default="all",
    values=("all", "safe"),
    group="Answer",
)
ANSWER_NULLABLE_OPTION: ConfigOption[list[str] | None] = _option(
    "answer.nullable",
    "list",
    "Answer fields the model may answer null, separated by ';' (a nested field as 'field.inner'); every other "
    "field is required and not null. Per field also 'answer.<field>.enum' (values separated by ';', for a "
    "CHAR/VARCHAR/STRING field), 'answer.<field>.min-items' and 'answer.<field>.max-items' (for an ARRAY).",
    group="Answer",
)
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
    "connect errors, timeouts, broken connections, 408, 429 (Retry-After honoured) and 502/503/504; with several "
    "replicas, a 500, a failed TLS handshake or an answer that is not HTTP goes to each other replica once.",
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
    "Deserializer backend: 'gpu' (libcudf in a Python worker), 'cpu' (the native simdjson core in the "
    "TaskManager's JVM) or 'auto': where the job's configuration declares GPU TaskManagers ('external-resources' "
    "naming gpu, 'external-resource.gpu.amount' > 0) the Python worker, which takes libcudf where its TaskManager "
    "has the GPU backend, else the native core; elsewhere the JVM's native core.",
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
    REQUEST_ROUTING,
    REQUEST_ROUTING_PREFIX_LENGTH,
    REQUEST_ROUTING_LOAD_BOUND,
    REQUEST_ROUTING_KEY_COLUMN,
    REQUEST_REPLICAS_RESOLVE_INTERVAL,
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
    ANSWER_CONSTRAINT,
    ANSWER_STRING_CHARACTERS,
    ANSWER_NULLABLE_OPTION,
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
        if o.group in ("General", "Request", "Request body", "Answer", "Retry", "Parse")
        and not o.required
        and o not in _NOT_FOR_MODELS
    ),
    PROMPT_TEMPLATE,
    SYSTEM_PROMPT,
)

# ---------------------------------------------------------------- 'format' = 'dspark-vllm'
# The format's own options, given with the 'dspark-vllm.' prefix (Flink strips it). The jar declares them to Flink
# from TableOptions.FORMAT (generated from these); the planner checks them (format_plan).
FORMAT_PROFILE: ConfigOption[str] = _option(
    "profile",
    "string",
    "The model profile: a built-in name or a profile file's path.",
    default="openai",
    group="Format",
)
FORMAT_ON_ERROR: ConfigOption[str] = _option(
    "on-error",
    "enum",
    "A rejected body: 'column' (a row with error_reason and error_field), 'skip' (no row; counted in "
    "numRecordsInErrors), or 'fail' (the job fails).",
    default="column",
    values=("column", "skip", "fail"),
    group="Format",
)
FORMAT_OPTIONS: tuple[ConfigOption[Any], ...] = (FORMAT_PROFILE, FORMAT_ON_ERROR)

# ---------------------------------------------------------------- retired keys
# What replaces prompts from another table: ML_PREDICT over that table keeps every column of the rows
# that asked, where a table would keep one. A key here is refused with its one line, before any other check (the jar's
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
