"""The connector's building blocks as SQL functions, for prompts and bodies from any table (pyflink).

    CREATE TEMPORARY FUNCTION parse_coder AS 'connector.flink.sql.parse_coder' LANGUAGE PYTHON;
    CREATE TEMPORARY FUNCTION vllm_request AS 'connector.flink.sql.vllm_request' LANGUAGE PYTHON;

    SELECT p.id, p.`language`, p.error FROM (SELECT parse_coder(body) AS p FROM raw_bodies);
    SELECT prompt, r.http_status, r.error
    FROM (SELECT prompt, vllm_request('http://vllm:8000', 'my-model', prompt) AS r FROM prompts);

- `parse_<profile>(body BYTES)` for each built-in profile (openai, coder, math, vl): a vectorized function
  whose result is a ROW of the profile's flat columns plus `error` and `error_field` (NULL when the body
  parsed). Nested ROWs are built in SQL (`ROW(p.prompt_tokens, ...)`).
- `vllm_request(endpoint, model, prompt)`: an async function (PyFlink's `AsyncScalarFunction`; its concurrency
  is `table.exec.async-scalar.max-concurrent-operations`, and `table.exec.async-scalar.timeout` must exceed a
  request's retries) returning ROW<body BYTES, http_status INT, latency_ms DOUBLE, attempts INT, error STRING,
  received_ms BIGINT>.
  Feed `r.body` to a parse function.

A 'dspark-vllm' table is the same steps with options, metadata and projection; these are for the cases a
table's own sources do not cover (prompts from a join, bodies stored with other columns).
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import pyarrow as pa
from pyflink.common import Row
from pyflink.table.udf import AsyncScalarFunction, FunctionContext, udf

from connector.flink.frames import INTERNAL, flat_schema
from connector.flink.functions import ParseFunction
from connector.flink.pyflink_fixes import arrow_results, copy_async_scalar_inputs
from connector.profiles import builtin_profiles, load_profile
from connector.schema.flink_types import arrow_to_flink_sql, quote_identifier

__all__ = ["RequestFunction", "SqlParseFunction", "parse_function_for", "vllm_request"]

copy_async_scalar_inputs()
arrow_results()
_RENAMED = {"_error": "error", "_error_field": "error_field"}


class SqlParseFunction(ParseFunction):
    """`parse_<profile>(body)`: the table's parse step with the profile's every column."""

    def eval(self, body: pd.Series, *unused: pd.Series) -> pa.StructArray:  # type: ignore[override]
        # The fields take the declared names (error, error_field) from the result type.
        return super().eval(body, pd.Series([""] * len(body)))


def parse_function_for(profile_name: str) -> Any:
    """The SQL function `parse_<profile>` of a profile (built-in name or file)."""
    profile = load_profile(profile_name)
    columns = tuple(n for n in flat_schema(profile).names if n not in ("_line", "_backend"))
    types = {f.name: arrow_to_flink_sql(f.type) for f in flat_schema(profile)}
    fields = ", ".join(f"{quote_identifier(_RENAMED.get(n, n))} {types[n]}" for n in columns)
    function = SqlParseFunction(profile, columns)
    return udf(function, result_type=f"ROW<{fields}>", func_type="pandas")


class RequestFunction(AsyncScalarFunction):
    """`vllm_request(endpoint, model, prompt)`: one request per row through `connector.client.VllmClient`."""

    def open(self, function_context: FunctionContext) -> None:
        self._clients: dict[tuple[str, str], Any] = {}

    async def eval(self, endpoint: str | None, model: str | None, prompt: str | None) -> Row:
        from connector.client import ClientConfig, VllmClient

        started = time.perf_counter()
        try:
            key = (str(endpoint), str(model))
            if key not in self._clients:
                self._clients[key] = VllmClient(config=ClientConfig(base_url=key[0], model=key[1]))
            payload = {"messages": [{"role": "user", "content": prompt or ""}]}
            outcome = await self._clients[key].send(payload)
            body, status, attempts, error = outcome.body or b"", outcome.status, outcome.attempts, outcome.error
            return Row(body, status, float(outcome.latency_ms), attempts, error, int(time.time() * 1000))
        except Exception as exc:  # a bad endpoint is an error row, never a failed task
            latency = (time.perf_counter() - started) * 1000.0
            return Row(b"", None, latency, 1, f"{type(exc).__name__}: {exc}", int(time.time() * 1000))


REQUEST_RESULT = (
    ("body", "BYTES"),
    ("http_status", "INT"),
    ("latency_ms", "DOUBLE"),
    ("attempts", "INT"),
    ("error", "STRING"),
    ("received_ms", "BIGINT"),
)
_RESULT = ", ".join(f"{quote_identifier(name)} {kind}" for name, kind in REQUEST_RESULT)
vllm_request = udf(RequestFunction(), result_type=f"ROW<{_RESULT}>")

for _name in builtin_profiles():
    globals()[f"parse_{_name}"] = parse_function_for(_name)
    __all__.append(f"parse_{_name}")
assert set(INTERNAL.names) >= set(_RENAMED)
