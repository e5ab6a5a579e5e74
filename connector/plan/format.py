"""The plan of a table with 'format' = 'dspark-vllm': a profile's columns, read by the native core from the bodies
another connector (Kafka, files) gives; what the core reads for a query (`connector.plan.parse.format_read`) is
planned when the decoder is made, for the columns the query reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connector.errors import OptionsError
from connector.options import (
    ANSWER_CONSTRAINT,
    ANSWER_STRING_CHARACTERS,
    FORMAT_ON_ERROR,
    FORMAT_OPTIONS,
    FORMAT_PROFILE,
    REQUEST_PARAM_OPTIONS,
    Options,
)
from connector.plan.answer import answer_fields, plan_answer
from connector.plan.contract import PLAN_VERSION
from connector.plan.layout import check_cast
from connector.plan.metadata import METADATA
from connector.plan.records import (
    Answer,
    FormatPlan,
    Layout,
    Physical,
    RowField,
    to_json,
)
from connector.profiles import load_profile
from connector.types.columns import output_schema
from connector.types.flink_types import arrow_to_flink_sql

__all__ = ["FORMAT_ERROR_COLUMNS", "format_plan"]

# Where a rejected body's reason and field go with 'on-error' = 'column' (parse_batch's inline error columns).
FORMAT_ERROR_COLUMNS = ("error_reason", "error_field")


def format_plan(declared: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of a table with 'format' = 'dspark-vllm' (`io.dspark.vllm.sql.DsparkVllmFormatFactory`).

    `declared["format"]`: the format's options without their 'dspark-vllm.' prefix. Declared physical columns
    are the profile's columns by name (the body's and the content properties', ROWs of them too, as in a
    'dspark-vllm' table) and, with
    'on-error' = 'column' (the default), `error_reason` (and `error_field`), which a rejected body fills.
    Answer: the profile, per physical column the core columns it reads and its layout, the columns the core
    makes, 'on-error'.
    """
    given = dict(declared["format"])
    unknown = sorted(
        k
        for k in set(given) - {o.key for o in FORMAT_OPTIONS}
        if not (k.startswith("answer.") and (k.count(".") >= 2 or k == "answer.nullable"))
    )
    if unknown:
        raise OptionsError(
            f"'format' = 'dspark-vllm' has no option {', '.join(repr('dspark-vllm.' + k) for k in unknown)}; "
            f"it takes {', '.join(repr('dspark-vllm.' + o.key) for o in FORMAT_OPTIONS)}."
        )
    profile = load_profile(given.get(FORMAT_PROFILE.key, str(FORMAT_PROFILE.default)))
    on_error = given.get(FORMAT_ON_ERROR.key, FORMAT_ON_ERROR.default)
    if on_error not in FORMAT_ON_ERROR.values:
        choices = ", ".join(map(repr, FORMAT_ON_ERROR.values))
        raise OptionsError(f"Option 'dspark-vllm.on-error' is {on_error!r}: use one of {choices}.")
    flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    settings = {k: v for k, v in given.items() if k.startswith("answer.")}
    physical = [c for c in declared["columns"] if c["kind"] == "physical" and c["name"] not in FORMAT_ERROR_COLUMNS]
    fields = answer_fields(physical, flat, settings)
    answer: Answer | None = None
    if fields:
        parsed = {
            ANSWER_CONSTRAINT.key: "response-format",
            ANSWER_STRING_CHARACTERS.key: "all",
            REQUEST_PARAM_OPTIONS["max_tokens"].key: None,
        }
        options = Options(parsed=parsed, given=frozenset(settings), raw=settings)
        profile, answer, _ = plan_answer("the format", profile, fields, options)
        flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    made = set(flat)
    names = []
    physical_reads: dict[str, Physical] = {}
    table_keys = {m.key for m in METADATA}
    for column in declared["columns"]:
        if column["kind"] == "metadata" and column.get("key") in table_keys:
            raise OptionsError(
                f"Column '{column['name']}': 'format' = 'dspark-vllm' has no metadata of its own ('{column['key']}' "
                "is a 'dspark-vllm' table's); a rejected body's reason is the column `error_reason STRING`."
            )
        if column["kind"] != "physical":
            continue  # the connector's metadata (Kafka's offset, ...), which Flink checks, or an expression
        names.append(column["name"])
        if answer is not None and column["name"] in {f.name for f in fields}:
            # Read by the answer check, whichever columns a query reads (`core_columns`).
            physical_reads[column["name"]] = Physical(needs=(), from_=Layout(answer=column["name"]))
            continue
        needs, layout = _format_column(column["name"], column["type"], flat, column["name"])
        physical_reads[column["name"]] = Physical(needs=tuple(needs), from_=layout)
    if on_error == "column" and FORMAT_ERROR_COLUMNS[0] not in names:
        raise OptionsError(
            "'format' = 'dspark-vllm' gives a rejected body as a row with its reason: declare a column "
            "`error_reason STRING` (and `error_field STRING`), or set 'dspark-vllm.on-error' to 'skip' (no row, "
            "counted in the metric numRecordsInErrors) or 'fail' (the job fails)."
        )
    return to_json(
        FormatPlan(
            version=PLAN_VERSION,
            profile=profile.document(),
            physical=physical_reads,
            columns=tuple(sorted(made)),
            types=tuple(flat[name] for name in sorted(made)),
            on_error=on_error,
            answer=answer,
        )
    )


def _format_column(
    name: str, ftype: Mapping[str, Any], flat: Mapping[str, str], where: str
) -> tuple[list[str], Layout]:
    """The core columns a declared column (or ROW field) reads, and its layout (what the JVM's format makes its row
    of: `io.dspark.vllm.engine.NativeDeserializationSchema` takes the projected columns' layouts from the plan);
    raises where the profile makes no such column."""
    root = ftype.get("root")
    if root == "ROW":
        needs: list[str] = []
        fields = []
        for field in ftype.get("fields", []):
            part, layout = _format_column(field["name"], field["type"], flat, f"{where}.{field['name']}")
            needs += part
            fields.append(RowField(name=field["name"], from_=layout))
        return needs, Layout(row=tuple(fields))
    if where in FORMAT_ERROR_COLUMNS:
        if root not in ("VARCHAR", "CHAR"):
            raise OptionsError(f"Column '{where}' holds a rejected body's reason: declare it STRING.")
        return [], Layout(column="_error" if where == FORMAT_ERROR_COLUMNS[0] else "_error_field")
    if name not in flat:
        raise OptionsError(f"Column '{where}' is not made by this profile; declare one of: {', '.join(sorted(flat))}.")
    check_cast(flat[name], ftype, where)  # the table's casts (the same RowShape makes the format's rows)
    return [name], Layout(column=name)
