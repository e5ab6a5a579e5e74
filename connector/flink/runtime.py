"""Entry points of a table's Python functions on the workers (pyflink).

A parse function's payload is a pickle of the call `parse_function(plan, columns)` (PyFlink's format for a
Python function), made here by `function_payload` when the Java factory asks the planner for it (it knows the
columns only after projection push-down; `python -m connector.plan` with a `parse_function`
question). Its two arguments are JSON text: the plan's `plan` (`ParseFunctionPlan.document()`: options, profile,
whether `created` is required) and the columns the query reads:

    parse_function('{"table": "answers", "options": {...}, "profile": [...], ...}',
                   '["id", "created", "_line", "_error", "_error_field", "_backend"]')

PyFlink unpickles the payload on the worker, which calls it and rebuilds the `ParseFunctionPlan` from the JSON.
(Requests run on the JVM: `io.dspark.vllm.engine.RequestStep`.)
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connector.flink.pyflink_fixes import arrow_results
from connector.plan.parse_function import ParseFunctionPlan

__all__ = ["function_payload", "parse_function"]


def parse_function(plan: str, columns: str):  # type: ignore[no-untyped-def]
    """The vectorized parse function of a table, producing `columns` (JSON list) in that order."""
    from connector.flink.functions import ParseFunction

    arrow_results()  # before PyFlink uses the function, which it does right after unpickling it
    return ParseFunction.of_table(ParseFunctionPlan.of_document(json.loads(plan)), tuple(json.loads(columns)))


class _Call:
    """Pickles as the call `function(*args)`: what unpickling it gives is the call's result."""

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        self.function = function
        self.args = args

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return self.function, self.args


def function_payload(plan: Mapping[str, Any], columns: Sequence[str]) -> bytes:
    """The payload of a table's parse function (what PyFlink's PythonScalarFunction carries): a pickle of
    `parse_function(plan, columns)` with both as JSON text, protocol 3 (PyFlink unpickles payloads with
    cloudpickle)."""
    return pickle.dumps(_Call(parse_function, json.dumps(plan), json.dumps(list(columns))), protocol=3)
