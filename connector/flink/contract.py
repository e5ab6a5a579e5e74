"""The contract between the Python planner and the connector's Java side, declared once (pure code).

The planner (`connector.flink.planner`) writes a plan as JSON; the jar (`io.dspark.vllm.flink.TablePlan`,
`io.dspark.vllm.request.RequestSpec`) reads it. Both sides check the versions below and refuse a plan of
another version with a message that says to install the same dspark-vllm everywhere, so a client and a
TaskManager of different releases never disagree silently. `tests/test_java_contract.py` runs the Java side's
own checks (`ContractCheck.java`) against plans this module makes.

- `PLAN_VERSION`: the plan's keys (see the planner's docstring).
- `CLIENT_SPEC_VERSION`: the request step's settings, `client_spec()` -> `RequestSpec`.
- `REQUEST_COLUMNS`: the row the request step adds to each prompt (name, Flink SQL type), in order.
- `PARSE_INTERNAL`: what the parse function produces beside the profile's columns.
"""

from __future__ import annotations

import json
from typing import Any

from connector.client.client import USER_AGENT, ClientConfig, prepare_request, response_format_of
from connector.options import (
    ENDPOINT,
    MODEL,
    REQUEST_API,
    REQUEST_CONNECT_TIMEOUT,
    REQUEST_MAX_BODY_SIZE,
    REQUEST_PARAM_OPTIONS,
    REQUEST_RATE_LIMIT,
    REQUEST_STRUCTURED_OUTPUT,
    REQUEST_TIMEOUT,
    REQUEST_TLS_CA_BUNDLE,
    REQUEST_TLS_CLIENT_CERT,
    REQUEST_TLS_CLIENT_KEY,
    REQUEST_TLS_VERIFY,
    RETRY_DEADLINE,
    RETRY_HOLD_WHILE_DOWN,
    RETRY_INITIAL_BACKOFF,
    RETRY_MAX_ATTEMPTS,
    RETRY_MAX_BACKOFF,
    RETRY_MAX_RETRY_AFTER,
    Options,
)
from connector.profiles import Profile

__all__ = ["CLIENT_SPEC_VERSION", "PARSE_INTERNAL", "PLAN_VERSION", "REQUEST_COLUMNS", "client_spec"]

PLAN_VERSION = 5
CLIENT_SPEC_VERSION = 1

# The prompt's columns, then what the request step adds (io.dspark.vllm.flink.RequestStep fills them in this
# order and checks the names against the plan).
REQUEST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("_prompt", "STRING"),
    ("_request_id", "STRING"),
    ("_body", "BYTES"),
    ("_http_status", "INT"),
    ("_latency_ms", "DOUBLE"),
    ("_attempts", "INT"),
    ("_request_error", "STRING"),
    ("_received_ms", "BIGINT"),
    ("_request_key", "STRING"),
    ("_cached", "BOOLEAN"),
)
PARSE_INTERNAL: tuple[tuple[str, str], ...] = (
    ("_line", "BIGINT"),
    ("_error", "STRING"),
    ("_error_field", "STRING"),
    ("_backend", "STRING"),
)

_PLACEHOLDER = "\x00dspark-vllm prompt\x00"


def _client_config(options: Options, profile: Profile, api_key: str | None) -> ClientConfig:
    params = {name: options.get(o) for name, o in REQUEST_PARAM_OPTIONS.items() if options.get(o) is not None}
    return ClientConfig(
        base_url=str(options.get(ENDPOINT)),
        api_key=api_key,
        model=options.get(MODEL),
        structured_output=profile if options.get(REQUEST_STRUCTURED_OUTPUT) else None,
        params=params,
    )


def client_spec(options: Options, profile: Profile, api_key: str | None) -> dict[str, Any]:
    """The request step's settings for `RequestSpec` (Java): endpoint, headers, the body around the prompt,
    deadlines, retries, the gate, TLS, concurrency. Each value comes from the table's (validated) options; the
    body is rendered by the same `prepare_request` as the Python client's, so both send the same requests."""
    config = _client_config(options, profile, api_key)
    chat = options.get(REQUEST_API) != "completions"
    payload: dict[str, Any] = (
        {"messages": [{"role": "user", "content": _PLACEHOLDER}]} if chat else {"prompt": _PLACEHOLDER}
    )
    body = json.dumps(
        prepare_request(config, payload, None, response_format_of(config)), ensure_ascii=False, allow_nan=False
    )
    prefix, suffix = body.split(json.dumps(_PLACEHOLDER, ensure_ascii=False))
    headers = {"user-agent": USER_AGENT, "content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    start, low, high, adaptive = options.concurrency
    rate = options.get(REQUEST_RATE_LIMIT)
    return {
        "version": CLIENT_SPEC_VERSION,
        "url": config.root_url + ("/v1/chat/completions" if chat else "/v1/completions"),
        "health_url": config.root_url + "/health",
        "headers": headers,
        "body_prefix": prefix,
        "body_suffix": suffix,
        "timeout_s": options.get(REQUEST_TIMEOUT),
        "connect_timeout_s": options.get(REQUEST_CONNECT_TIMEOUT),
        "deadline_s": options.get(RETRY_DEADLINE),
        "max_attempts": options.get(RETRY_MAX_ATTEMPTS),
        "backoff_initial_s": options.get(RETRY_INITIAL_BACKOFF),
        "backoff_max_s": options.get(RETRY_MAX_BACKOFF),
        "max_retry_after_s": options.get(RETRY_MAX_RETRY_AFTER),
        "hold_while_down": options.get(RETRY_HOLD_WHILE_DOWN),
        "rate_limit": rate,
        "max_body_bytes": options.get(REQUEST_MAX_BODY_SIZE),
        "tls": {
            "verify": options.get(REQUEST_TLS_VERIFY),
            "ca_bundle": options.get(REQUEST_TLS_CA_BUNDLE),
            "client_cert": options.get(REQUEST_TLS_CLIENT_CERT),
            "client_key": options.get(REQUEST_TLS_CLIENT_KEY),
        },
        "concurrency": {"initial": start, "min": low, "max": high, "adaptive": adaptive},
    }
