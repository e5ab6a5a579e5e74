"""`python -m connector.plan < declared.json > plan.json`: the planner the jar's factories run on the client
(io.dspark.vllm.sql.PythonPlanner), one question on stdin, one JSON answer on stdout (see `connector.plan`)."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from connector.errors import DsparkError
from connector.plan.format import format_plan
from connector.plan.model import model_plan
from connector.plan.parse import format_read, table_read
from connector.plan.records import FormatPlan, TablePlan, from_json, to_json
from connector.plan.table import table_plan

__all__ = ["main", "native_read_answer", "parse_function_payload"]


def parse_function_payload(question: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of a parse function in a Python worker: `plan` (a plan's `plan`) and the `columns` it
    produces, in their order."""
    from connector.flink.runtime import function_payload  # (pyflink's side: only for this question)

    payload = function_payload(question["plan"], [str(c) for c in question["columns"]])
    return {"payload": base64.b64encode(payload).decode("ascii")}


def native_read_answer(question: Mapping[str, Any]) -> dict[str, Any]:
    """What the native core reads for a scan, once its projection is known: `table` (a table's plan) with the
    `physical` columns and `metadata` keys it reads, or `format` (a format's plan) with the `physical` columns."""
    if "table" in question:
        table = from_json(TablePlan, question["table"])
        read = table_read(table, question["physical"], question["metadata"])
    else:
        read = format_read(from_json(FormatPlan, question["format"]), question["physical"])
    return to_json(read)


def main(argv: Sequence[str] | None = None) -> int:
    """Read the declared table from stdin, write the plan (or the user's error) to stdout as JSON."""
    try:
        declared = json.load(sys.stdin)
        answer: dict[str, Any]
        if "parse_function" in declared:
            answer = parse_function_payload(declared["parse_function"])
        elif "native_read" in declared:
            answer = native_read_answer(declared["native_read"])
        elif "model" in declared:
            answer = model_plan(declared)
        else:
            answer = format_plan(declared) if "format" in declared else table_plan(declared)
    except DsparkError as exc:
        answer = {"error": str(exc)}
    except Exception as exc:  # a bug of ours: one line for the user, the details on stderr for the log
        import traceback

        traceback.print_exc(file=sys.stderr)
        answer = {"error": f"dspark-vllm could not plan the table ({type(exc).__name__}: {exc}); please report it"}
    json.dump(answer, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
