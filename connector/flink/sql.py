"""The connector's parse step as SQL functions, for bodies stored in any table (pyflink).

    CREATE TEMPORARY FUNCTION parse_coder AS 'connector.flink.sql.parse_coder' LANGUAGE PYTHON;

    SELECT p.id, p.`language`, p.error FROM (SELECT parse_coder(body) AS p FROM raw_bodies);

- `parse_<profile>(body BYTES)` for each built-in profile (openai, coder, math, vl): a vectorized function
  whose result is a ROW of the profile's flat columns plus `error` and `error_field` (NULL when the body
  parsed). Nested ROWs are built in SQL (`ROW(p.prompt_tokens, ...)`).

Requests from the rows of any table go through `ML_PREDICT` with a 'dspark-vllm' model (the JVM's request
step); naming a `vllm_request` function says so in one line.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
from pyflink.table.udf import udf

from connector.errors import DsparkError
from connector.flink.frames import INTERNAL, flat_schema
from connector.flink.functions import ParseFunction
from connector.flink.pyflink_fixes import arrow_results
from connector.profiles import builtin_profiles, load_profile
from connector.types.flink_types import arrow_to_flink_sql, quote_identifier

__all__ = ["SqlParseFunction", "parse_function_for"]

arrow_results()
_RENAMED = {"_error": "error", "_error_field": "error_field"}


class SqlParseFunction(ParseFunction):
    """`parse_<profile>(body)`: the table's parse step with the profile's every column."""

    def eval(self, body: pd.Series, *unused: pd.Series) -> pa.StructArray:  # type: ignore[override]
        # The fields take the declared names (error, error_field) from the result type; no `_line` is returned
        # (a body given to a function has no line of a file).
        return super().eval(body, pd.Series(0, index=body.index, dtype="int64"))


def parse_function_for(profile_name: str, backend: str = "auto") -> Any:
    """The SQL function `parse_<profile>` of a profile (built-in name or file), parsing on `backend` (the
    table's 'parse.backend' values: 'gpu' is libcudf in the Python worker, one GPU per TaskManager)."""
    profile = load_profile(profile_name)
    columns = tuple(n for n in flat_schema(profile).names if n not in ("_line", "_backend"))
    types = {f.name: arrow_to_flink_sql(f.type) for f in flat_schema(profile)}
    fields = ", ".join(f"{quote_identifier(_RENAMED.get(n, n))} {types[n]}" for n in columns)
    function = SqlParseFunction(profile, columns, backend=backend)
    return udf(function, result_type=f"ROW<{fields}>", func_type="pandas")


# Named, to say what to use instead: ML_PREDICT runs the JVM's request step for the rows of any table, with none
# of PyFlink's AsyncScalarFunction limits (ordered, 10 requests at once by default, every bundle end waiting).
RETIRED_FUNCTIONS = {
    "vllm_request": (
        "The SQL function 'vllm_request' is retired: ask the model with ML_PREDICT over the table of prompts "
        "(CREATE MODEL ... WITH ('provider' = 'dspark-vllm'); docs/flink.md, \"Enrichment: ML_PREDICT with a "
        "'dspark-vllm' model\")."
    )
}


def __getattr__(name: str) -> Any:
    if name in RETIRED_FUNCTIONS:
        raise DsparkError(RETIRED_FUNCTIONS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


for _name in builtin_profiles():
    globals()[f"parse_{_name}"] = parse_function_for(_name)
    __all__.append(f"parse_{_name}")
assert set(INTERNAL.names) >= set(_RENAMED)
