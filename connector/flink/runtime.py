"""Entry points of a table's Python functions on the workers (pyflink).

The Java factory builds each function's payload as a pickle that calls one of these with the plan made by
`connector.flink.planner` (a pickled `TablePlan`) and, for the parse step, the columns the query reads:

    parse_function(plan, '["id", "created", "_line", "_error", "_error_field", "_backend"]')

(Requests run on the JVM: `io.dspark.vllm.flink.RequestStep`.)
"""

from __future__ import annotations

import json
import pickle

from connector.flink.planner import TablePlan
from connector.flink.pyflink_fixes import arrow_results, copy_async_scalar_inputs

__all__ = ["parse_function"]

copy_async_scalar_inputs()
arrow_results()


def _plan(data: bytes) -> TablePlan:
    plan = pickle.loads(data)
    if not isinstance(plan, TablePlan):
        raise TypeError(f"expected a TablePlan, got {type(plan).__name__}")
    return plan


def parse_function(plan: bytes, columns: str):  # type: ignore[no-untyped-def]
    """The vectorized parse function of a table, producing `columns` (JSON list) in that order."""
    from connector.flink.functions import ParseFunction

    return ParseFunction.of_table(_plan(plan), tuple(json.loads(columns)))
