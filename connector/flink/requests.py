"""Request mode: prompts -> PyFlink async I/O calling our client -> request outcomes as a table (pyflink).

    prompts (prompts.table | prompts.path | prompts.rate)  -> Row(prompt, request_id)
      -> AsyncDataStream.unordered_wait(RequestFunction, timeout 0, capacity = request.concurrency)
      -> Row(_body, _prompt, _request_id, _http_status, _latency_ms, _attempts, _request_error)

The client retries (connect errors, timeouts, 429 with Retry-After, 502/503/504) and never raises: every
prompt gives exactly one outcome, and `async_invoke` catches anything else too, because an exception that
Flink does not retry fails the task. In-flight requests are capped by `python.fn-execution.bundle.size`
and drained at every bundle end and checkpoint (they are not kept in state): at-least-once, a prompt that was
in flight at a failure is sent again after the restart with the same request id.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from pyflink.common import Row, Time, Types
from pyflink.datastream import AsyncDataStream
from pyflink.datastream.functions import AsyncFunction, RuntimeContext
from pyflink.table import DataTypes, Schema, StreamTableEnvironment, Table, TableEnvironment
from pyflink.table.expressions import col, null_of

from connector.errors import OptionsError
from connector.flink.catalog import DeclaredTable, quote
from connector.options import Options
from connector.profiles import Profile

__all__ = ["OUTCOME_COLUMNS", "RequestFunction", "request_source"]

OUTCOME_COLUMNS = ["_body", "_prompt", "_request_id", "_http_status", "_latency_ms", "_attempts", "_request_error"]
OUTCOME_TYPE = Types.ROW_NAMED(
    OUTCOME_COLUMNS,
    [
        Types.PRIMITIVE_ARRAY(Types.BYTE()),
        Types.STRING(),
        Types.STRING(),
        Types.INT(),
        Types.DOUBLE(),
        Types.INT(),
        Types.STRING(),
    ],
)


class RequestFunction(AsyncFunction):
    """One request per prompt through `connector.client.VllmClient`; metrics in group `dspark`:
    requests, responses (2xx), failed, retries, latency_ms (total), in_flight."""

    def __init__(self, options: dict[str, Any], profile: Profile | None) -> None:
        self.options = options
        self.profile = profile

    def open(self, runtime_context: RuntimeContext) -> None:
        from connector.client import ClientConfig, VllmClient

        o = self.options
        api_key = o.get("api-key")
        if o.get("api-key.env"):
            api_key = os.environ.get(o["api-key.env"])
        config = ClientConfig(
            base_url=o["endpoint"],
            api_key=api_key,
            model=o["model"],
            concurrency=o["request.concurrency"],
            timeout_s=o["request.timeout"],
            max_attempts=o["request.max-retries"] + 1,
            rate_limit=o.get("request.rate-limit"),
            verify=o["request.tls-verify"],
            engine=o["request.engine"],
            structured_output=self.profile if o["request.structured-output"] else None,
        )
        self._client = VllmClient(config=config)
        group = runtime_context.get_metrics_group().add_group("dspark")
        self._requests = group.counter("requests")
        self._responses = group.counter("responses")
        self._failed = group.counter("failed")
        self._retries = group.counter("retries")
        self._latency = group.counter("latency_ms")
        self._in_flight = 0
        group.gauge("in_flight", lambda: int(self._in_flight))

    def close(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            import asyncio
            import contextlib

            # The worker's loop may be gone already; the sockets close with the process then.
            with contextlib.suppress(Exception):
                asyncio.get_event_loop().run_until_complete(client.aclose())

    def payload(self, prompt: str) -> dict[str, Any]:
        o = self.options
        if o["request.api"] == "completions":
            payload: dict[str, Any] = {"prompt": prompt}
        else:
            payload = {"messages": [{"role": "user", "content": prompt}]}
        if o.get("request.max-tokens"):
            payload["max_tokens"] = o["request.max-tokens"]
        return payload

    async def async_invoke(self, value: Row) -> list[Row]:
        prompt, request_id = value[0], value[1]
        self._requests.inc(1)
        self._in_flight += 1
        started = time.perf_counter()
        try:
            outcome = await self._client.send(self.payload(prompt or ""), request_id=request_id)
            body, status, latency, attempts, error = (
                outcome.body,
                outcome.status,
                outcome.latency_ms,
                outcome.attempts,
                outcome.error,
            )
        except Exception as exc:  # never fail the task for one request
            body, status, attempts = None, None, 1
            latency = (time.perf_counter() - started) * 1000.0
            error = f"{type(exc).__name__}: {exc}"
        finally:
            self._in_flight -= 1
        if error is None:
            self._responses.inc(1)
        else:
            self._failed.inc(1)
        self._retries.inc(max(0, attempts - 1))
        self._latency.inc(int(latency))
        return [Row(body or b"", prompt, request_id, status, float(latency), attempts, error)]

    def timeout(self, value: Row) -> list[Row]:
        return [Row(b"", value[0], value[1], None, 0.0, 0, "timed out in Flink's async operator")]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _prompts(t_env: TableEnvironment, declared: DeclaredTable, options: Options) -> Table:
    """Row(prompt STRING, request_id STRING): ids are deterministic, so a prompt sent twice is recognisable."""
    name = f"__dspark_{declared.name}_prompts"
    t_env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {quote(name)}")
    if options["prompts.rate"] is not None:
        count = options["prompts.count"]
        end = count - 1 if count else 2**62
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE {quote(name)} (n BIGINT) WITH ('connector' = 'datagen', "
            f"'rows-per-second' = '{options['prompts.rate']}', 'fields.n.kind' = 'sequence', "
            f"'fields.n.start' = '0', 'fields.n.end' = '{end}')"
        )
        template = _literal(options["prompts.template"])
        return t_env.sql_query(
            f"SELECT REPLACE({template}, '{{n}}', CAST(n AS STRING)) AS prompt, "
            f"{_literal(declared.name + '-')} || CAST(n AS STRING) AS request_id FROM {quote(name)}"
        )
    if options["prompts.path"] is not None:
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE {quote(name)} (line STRING) WITH ('connector' = 'filesystem', "
            f"'path' = {_literal(options['prompts.path'])}, 'format' = 'raw')"
        )
        return t_env.sql_query(f"SELECT line AS prompt, MD5(line) AS request_id FROM {quote(name)}")
    table = t_env.from_path(options["prompts.table"])
    column = options["prompts.column"]
    names = table.get_schema().get_field_names()
    if column not in names:
        raise OptionsError(
            f"Option 'prompts.table' = '{options['prompts.table']}' has no column '{column}'; "
            f"set 'prompts.column' to one of {', '.join(names)}."
        )
    request_id = col("request_id") if "request_id" in names else col(column).md5
    return table.select(col(column).cast(DataTypes.STRING()).alias("prompt"), request_id.alias("request_id"))


def request_id_of(prompt: str) -> str:
    """The request id a prompt from 'prompts.path' gets (MD5 of the line, as Flink's MD5 gives it)."""
    return hashlib.md5(prompt.encode("utf-8")).hexdigest()


def request_source(t_env: TableEnvironment, declared: DeclaredTable, options: Options, profile: Profile) -> Table:
    """The table of request outcomes, with the columns the parse step expects (see `pipeline.PASSTHROUGH`)."""
    if not isinstance(t_env, StreamTableEnvironment):
        raise OptionsError(
            f"Table '{declared.name}' has 'mode' = 'request', which needs PyFlink's async I/O: create the "
            "environment with StreamTableEnvironment.create(env)."
        )
    prompts = t_env.to_data_stream(_prompts(t_env, declared, options))
    function = RequestFunction(dict(options), profile)
    outcomes = AsyncDataStream.unordered_wait(
        prompts,
        function,
        Time.seconds(0),  # no per-element timers: the client's own timeout and retries bound each request
        options["request.concurrency"],
        output_type=OUTCOME_TYPE,
    )
    schema = Schema.new_builder()
    for name, dtype in zip(
        OUTCOME_COLUMNS,
        [
            DataTypes.BYTES(),
            DataTypes.STRING(),
            DataTypes.STRING(),
            DataTypes.INT(),
            DataTypes.DOUBLE(),
            DataTypes.INT(),
            DataTypes.STRING(),
        ],
        strict=True,
    ):
        schema.column(name, dtype)
    table = t_env.from_data_stream(outcomes, schema.build())
    return table.select(
        col("_body"),
        null_of(DataTypes.STRING()).alias("_source"),
        col("_prompt"),
        col("_request_id"),
        col("_http_status"),
        col("_latency_ms"),
        col("_attempts"),
        col("_request_error"),
    )
