"""Request mode's Python step: one prompt -> one request outcome, as an async scalar function (pyflink).

    prompts -> request(prompt, request_id) -> ROW<body, http_status, latency_ms, attempts, error> -> parse

PyFlink runs it with `table.exec.async-scalar.*` (`max-concurrent-operations` = 'request.concurrency'; no
Flink retries and a timeout longer than any request can take: the client retries and bounds each request
itself, and never raises, so every prompt gives exactly one outcome). In-flight requests are drained at every
bundle end and checkpoint (they are not kept in state): at-least-once, a prompt in flight at a failure is sent
again after the restart with the same request id.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from typing import Any

from pyflink.common import Row
from pyflink.table.udf import AsyncScalarFunction, FunctionContext

from connector.flink.planner import TablePlan
from connector.options import (
    ENDPOINT,
    MODEL,
    REQUEST_API,
    REQUEST_CONCURRENCY,
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

__all__ = ["RequestFunction", "request_id_of"]


class RequestFunction(AsyncScalarFunction):
    """One request per prompt through `connector.client.VllmClient`; metrics in group `dspark`:
    requests, responses (2xx), failed, retries, latency_ms (total), in_flight."""

    def __init__(self, plan: TablePlan) -> None:
        self.plan = plan

    def open(self, function_context: FunctionContext) -> None:
        from connector.client import VllmClient

        self._client = VllmClient(config=client_config(self.plan))
        group = function_context.get_metric_group().add_group("dspark")
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
            # The worker's loop may be gone already; the sockets close with the process then.
            with contextlib.suppress(Exception):
                asyncio.new_event_loop().run_until_complete(client.aclose())

    def payload(self, prompt: str) -> dict[str, Any]:
        # The request parameters ('request.temperature', ...) are the client's defaults of every payload.
        if self.plan.options.get(REQUEST_API) == "completions":
            return {"prompt": prompt}
        return {"messages": [{"role": "user", "content": prompt}]}

    async def eval(self, prompt: str | None, request_id: str | None) -> Row:
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
        return Row(body or b"", status, float(latency), attempts, error)


def client_config(plan: TablePlan) -> Any:
    """The client of a table: its `request.*` options (the key was read on the client by the planner)."""
    from connector.client import ClientConfig

    o: Options = plan.options
    params = {name: o.get(option) for name, option in REQUEST_PARAM_OPTIONS.items() if o.get(option) is not None}
    return ClientConfig(
        base_url=str(o.get(ENDPOINT)),
        api_key=plan.api_key,
        model=o.get(MODEL),
        concurrency=o.get(REQUEST_CONCURRENCY),
        timeout_s=o.get(REQUEST_TIMEOUT),
        connect_timeout_s=o.get(REQUEST_CONNECT_TIMEOUT),
        deadline_s=o.get(RETRY_DEADLINE),
        max_attempts=o.get(RETRY_MAX_ATTEMPTS),
        backoff_initial_s=o.get(RETRY_INITIAL_BACKOFF),
        backoff_max_s=o.get(RETRY_MAX_BACKOFF),
        max_retry_after_s=o.get(RETRY_MAX_RETRY_AFTER),
        hold_while_down=o.get(RETRY_HOLD_WHILE_DOWN),
        rate_limit=o.get(REQUEST_RATE_LIMIT),
        max_body_bytes=o.get(REQUEST_MAX_BODY_SIZE),
        verify=o.get(REQUEST_TLS_VERIFY),
        ca_bundle=o.get(REQUEST_TLS_CA_BUNDLE),
        client_cert=o.get(REQUEST_TLS_CLIENT_CERT),
        client_key=o.get(REQUEST_TLS_CLIENT_KEY),
        structured_output=plan.profile if o.get(REQUEST_STRUCTURED_OUTPUT) else None,
        params=params,
    )


def request_id_of(prompt: str) -> str:
    """The request id a prompt from 'prompts.path' gets (MD5 of the line, as Flink's MD5 gives it)."""
    return hashlib.md5(prompt.encode("utf-8")).hexdigest()
