"""The contract between the Python planner and the connector's Java side, declared once (pure code).

The planner (`connector.plan`) writes a plan as JSON, made of the records of `connector.plan.records`;
the jar reads it with the reader generated from them (`io.dspark.vllm.plan.PlanReader`). Both sides check the
versions below and refuse a plan of another version with a message that says to install the same dspark-vllm
everywhere, so a client and a TaskManager of different releases never disagree silently.
`tests/test_java_contract.py` runs the Java side's own checks (`ContractCheck.java`) against plans this module
makes.

- `PLAN_VERSION`: the plan's keys, `CLIENT_SPEC_VERSION`: the request step's settings (`client_spec()` ->
  `RequestSpec`); both declared with the plan's records in `connector.plan.records`.
- `REQUEST_COLUMNS`: the row the request step adds to each prompt (name, Flink SQL type), in order.
- `PARSE_INTERNAL`: what the parse function produces beside the profile's columns.

The jar's side of what is declared here and beside it (the versions, the request columns, the error kinds of
`connector.server.outcome.ERROR_KINDS`, the metric names of `connector.flink.metrics`) is generated into
`io.dspark.vllm.plan.PlanContract` (`python -m connector.plan.contract --java FILE`, `--check FILE`);
tests/test_java_contract.py fails on a stale file or a name the Java code writes by hand.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from connector.flink.metrics import GROUP, PARSE_METRICS, REPLICA_GROUP, REPLICA_METRICS, REQUEST_METRICS
from connector.options import (
    ENDPOINT,
    MODEL,
    REQUEST_API,
    REQUEST_CONNECT_TIMEOUT,
    REQUEST_MAX_BODY_SIZE,
    REQUEST_PARAM_OPTIONS,
    REQUEST_RATE_LIMIT,
    REQUEST_REPLICAS_RESOLVE_INTERVAL,
    REQUEST_ROUTING,
    REQUEST_ROUTING_LOAD_BOUND,
    REQUEST_ROUTING_PREFIX_LENGTH,
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
from connector.options.endpoint import base_urls, root
from connector.plan.records import CLIENT_SPEC_VERSION, PLAN_VERSION, ClientSpec, Concurrency, Routing, Tls
from connector.profiles import Profile
from connector.server.outcome import ERROR_KINDS
from connector.server.request import USER_AGENT, ClientConfig, prepare_request, response_format_of

__all__ = ["CLIENT_SPEC_VERSION", "PARSE_INTERNAL", "PLAN_VERSION", "REQUEST_COLUMNS", "client_spec", "contract_java"]


# The prompt's columns, then what the request step adds (io.dspark.vllm.engine.RequestStep fills them in this
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
    ("_replica", "STRING"),
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
        base_url=base_urls(str(options.get(ENDPOINT)))[0],
        api_key=api_key,
        model=options.get(MODEL),
        structured_output=profile if options.get(REQUEST_STRUCTURED_OUTPUT) else None,
        params=params,
    )


def client_spec(
    options: Options, profile: Profile, api_key: str | None, answer_body: Mapping[str, Any] | None = None
) -> ClientSpec:
    """The request step's settings for `RequestSpec` (Java): endpoint, headers, the body around the prompt,
    deadlines, retries, the gate, TLS, concurrency. Each value comes from the table's (validated) options; the
    body is rendered by `prepare_request` (connector.server.request), written once. `answer_body`: what holds
    the server to the answer fields' schema (`response_format` or `structured_outputs`), which replaces the
    profile's structured output."""
    config = _client_config(options, profile, api_key)
    chat = options.get(REQUEST_API) != "completions"
    payload: dict[str, Any] = (
        {"messages": [{"role": "user", "content": _PLACEHOLDER}]} if chat else {"prompt": _PLACEHOLDER}
    )
    if answer_body is not None:
        config = dataclasses.replace(config, structured_output=None)
        before = list(answer_body.get("messages", ()))  # a system message that states the schema
        payload.update({k: v for k, v in answer_body.items() if k != "messages"})
        if before and chat:
            payload["messages"] = [*before, *payload["messages"]]
    body = json.dumps(
        prepare_request(config, payload, None, response_format_of(config)), ensure_ascii=False, allow_nan=False
    )
    prefix, suffix = body.split(json.dumps(_PLACEHOLDER, ensure_ascii=False))
    headers = {"user-agent": USER_AGENT, "content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    start, low, high, adaptive = options.concurrency
    rate = options.get(REQUEST_RATE_LIMIT)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    roots = [root(url) for url in base_urls(str(options.get(ENDPOINT)))]
    return ClientSpec(
        version=CLIENT_SPEC_VERSION,
        url=roots[0] + path,
        health_url=roots[0] + "/health",
        urls=tuple(root + path for root in roots),
        health_urls=tuple(root + "/health" for root in roots),
        routing=Routing(
            mode=options.get(REQUEST_ROUTING),
            prefix_bytes=options.get(REQUEST_ROUTING_PREFIX_LENGTH),
            load_bound=options.get(REQUEST_ROUTING_LOAD_BOUND),
            resolve_interval_s=options.get(REQUEST_REPLICAS_RESOLVE_INTERVAL),
        ),
        headers=headers,
        body_prefix=prefix,
        body_suffix=suffix,
        timeout_s=options.get(REQUEST_TIMEOUT),
        connect_timeout_s=options.get(REQUEST_CONNECT_TIMEOUT),
        deadline_s=options.get(RETRY_DEADLINE),
        max_attempts=options.get(RETRY_MAX_ATTEMPTS),
        backoff_initial_s=options.get(RETRY_INITIAL_BACKOFF),
        backoff_max_s=options.get(RETRY_MAX_BACKOFF),
        max_retry_after_s=options.get(RETRY_MAX_RETRY_AFTER),
        hold_while_down=options.get(RETRY_HOLD_WHILE_DOWN),
        rate_limit=rate,
        max_body_bytes=options.get(REQUEST_MAX_BODY_SIZE),
        tls=Tls(
            verify=options.get(REQUEST_TLS_VERIFY),
            ca_bundle=options.get(REQUEST_TLS_CA_BUNDLE),
            client_cert=options.get(REQUEST_TLS_CLIENT_CERT),
            client_key=options.get(REQUEST_TLS_CLIENT_KEY),
        ),
        concurrency=Concurrency(initial=start, min=low, max=high, adaptive=adaptive),
    )


def _constant(name: str) -> str:
    """A Java constant's name: numRecordsIn -> NUM_RECORDS_IN, too-large -> TOO_LARGE, latencyMsP50 ->
    LATENCY_MS_P50."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.replace("-", "_"))
    return snake.upper()


def contract_java() -> str:
    """`io.dspark.vllm.plan.PlanContract`: this module's contract as the jar reads it. Generated, not edited."""

    def literal(text: str) -> str:
        return json.dumps(text)

    def strings(values: tuple[str, ...] | list[str]) -> str:
        return "List.of(" + ", ".join(literal(v) for v in values) + ")"

    lines = [
        "package io.dspark.vllm.plan;",
        "",
        "import java.util.List;",
        "",
        "/**",
        " * GENERATED by {@code python -m connector.plan.contract --java}: do not edit. The contract between the",
        " * Python planner and the jar, declared in connector/plan/contract.py, connector/server/outcome.py and",
        " * connector/flink/metrics.py.",
        " */",
        "public final class PlanContract {",
        "    private PlanContract() {}",
        "",
        "    /** The plan's layout ({@code PLAN_VERSION}). */",
        f"    public static final int PLAN_VERSION = {PLAN_VERSION};",
        "    /** The request step's settings ({@code CLIENT_SPEC_VERSION}). */",
        f"    public static final int CLIENT_SPEC_VERSION = {CLIENT_SPEC_VERSION};",
        "",
        "    /** The row the request step makes ({@code REQUEST_COLUMNS}): names and Flink SQL types, in order. */",
        f"    public static final List<String> REQUEST_COLUMN_NAMES = {strings([n for n, _ in REQUEST_COLUMNS])};",
        f"    public static final List<String> REQUEST_COLUMN_TYPES = {strings([t for _, t in REQUEST_COLUMNS])};",
        "",
        '    /** A failed request\'s kind ({@code ERROR_KINDS}): its error is "kind: message". */',
    ]
    lines += [f"    public static final String {_constant(k)} = {literal(k)};" for k in ERROR_KINDS]
    lines += [
        f"    public static final List<String> ERROR_KINDS = List.of({', '.join(_constant(k) for k in ERROR_KINDS)});",
        "",
        "    /** The metric group of every step ({@code metrics.GROUP}). */",
        f"    public static final String GROUP = {literal(GROUP)};",
        "    /** The key of each replica's group in it ({@code metrics.REPLICA_GROUP}). */",
        f"    public static final String REPLICA_GROUP = {literal(REPLICA_GROUP)};",
        "",
        "    /** The metrics' names ({@code metrics.PARSE_METRICS}, {@code REQUEST_METRICS}, {@code REPLICA_METRICS}).",
        "     */",
    ]
    names = dict.fromkeys(PARSE_METRICS + REQUEST_METRICS + REPLICA_METRICS)
    lines += [f"    public static final String {_constant(m)} = {literal(m)};" for m in names]
    lines += ["}", ""]
    return "\n".join(lines)


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("--java", "--check"):
        print("usage: python -m connector.plan.contract --java FILE | --check FILE", file=sys.stderr)
        return 2
    path = Path(argv[1])
    text = contract_java()
    if argv[0] == "--java":
        path.write_text(text)
        return 0
    if not path.exists() or path.read_text() != text:
        print(f"{path} is stale: run python -m connector.plan.contract --java {path}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
