"""The plan of a 'connector' = 'dspark-vllm' table: its source (replay files, prompt files, a rate), the request
step, the parse step, each declared column's layout and the metadata keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from connector.errors import OptionsError
from connector.options import (
    ARROW_BATCH,
    BUNDLE_SIZE,
    BUNDLE_TIME,
    MODE,
    MODEL,
    PROFILE,
    PROMPTS_COUNT,
    PROMPTS_PATH,
    PROMPTS_RATE,
    PROMPTS_TEMPLATE,
    REPLAY_MONITOR_INTERVAL,
    REPLAY_PATH,
    REQUEST_API,
    REQUEST_OUTPUT_MODE,
    RETRY_DEADLINE,
    RETRY_ON_FAILURE,
    Options,
    validate,
)
from connector.plan.answer import ANSWER_FACTS, answer_fields, plan_answer
from connector.plan.contract import PARSE_INTERNAL, PLAN_VERSION, REQUEST_COLUMNS, client_spec
from connector.plan.layout import column_layout, refuse_not_null
from connector.plan.metadata import metadata_for
from connector.plan.parse import native_parse
from connector.plan.parse_function import ParseFunctionPlan
from connector.plan.records import (
    Answer,
    Column,
    Layout,
    MetadataKey,
    NameType,
    Physical,
    Source,
    TablePlan,
    TableRequest,
    to_json,
)
from connector.plan.request import api_key_of, store_of
from connector.profiles import load_profile
from connector.types.answer import instruction
from connector.types.columns import output_schema
from connector.types.flink_types import arrow_to_flink_sql

__all__ = ["INTERNAL_COLUMNS", "table_plan"]

# Produced by the parse function beside the profile's columns (see connector.flink.frames).
INTERNAL_COLUMNS = PARSE_INTERNAL


def _source(table: str, options: Options) -> Source:
    """What the jar builds the internal source from (io.dspark.vllm.sql.Sources): data, no SQL."""
    mode = options.get(MODE)
    if mode == "replay":
        interval = options.get(REPLAY_MONITOR_INTERVAL)
        return Source(
            kind="replay",
            path=str(options.get(REPLAY_PATH)),
            monitor_interval_ms=None if interval is None else max(1, round(interval * 1000)),
        )
    if options.get(PROMPTS_RATE) is not None:
        count = options.get(PROMPTS_COUNT)
        # Not SQL's datagen 'sequence': it holds every number still to come in memory and in each checkpoint,
        # and cannot start at all without an end (Sources.java keeps ranges instead).
        return Source(
            kind="rate",
            rate=options.get(PROMPTS_RATE),
            count=-1 if count is None else count,
            template=str(options.get(PROMPTS_TEMPLATE)),
            table=table,
        )
    return Source(kind="prompts", path=str(options.get(PROMPTS_PATH)))


def _settings(options: Options) -> dict[str, str]:
    """The Flink settings of this table's own Python operator (the parse function)."""
    return {
        BUNDLE_SIZE: str(options.bundle_size),
        ARROW_BATCH: str(options.arrow_batch_size),
        BUNDLE_TIME: str(max(1, round(options.bundle_time * 1000))),  # a long (ms) in PyFlink
    }


def _bounded(options: Options) -> bool:
    if options.get(MODE) == "replay":
        return options.get(REPLAY_MONITOR_INTERVAL) is None
    if options.get(PROMPTS_RATE) is not None:
        return options.get(PROMPTS_COUNT) is not None
    return options.get(PROMPTS_PATH) is not None


def table_plan(declared: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of one declared table (see the module docstring); raises DsparkError for the user's mistakes."""
    name = str(declared["name"])
    options = validate(declared["options"])
    profile = load_profile(options.get(PROFILE))
    mode = options.get(MODE)
    flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    fields = answer_fields([c for c in declared["columns"] if c["kind"] == "physical"], flat, options.raw)
    answer: Answer | None = None
    answer_body: dict[str, Any] | None = None
    if fields:
        profile, answer, answer_body = plan_answer(f"table '{name}'", profile, fields, options)
        flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
        if answer_body is None and mode == "request":  # 'answer.constraint' = 'prompt': a system message says it
            if options.get(REQUEST_API) == "completions":
                raise OptionsError(
                    "Option 'answer.constraint' = 'prompt' puts the answer's schema in a system message, which "
                    "'request.api' = 'completions' has not: use 'chat', or 'response-format'."
                )
            answer_body = {"messages": [{"role": "system", "content": instruction(answer.schema)}]}
    answered = [f.name for f in fields]
    # Every answer field is checked on every row, whichever columns a query reads: all are parsed.
    answer_needs = sorted({*answered, *ANSWER_FACTS}) if answered else []

    physical: dict[str, Physical] = {}
    for column in declared["columns"]:
        if column["kind"] == "physical" and column["name"] in answered:
            refuse_not_null(column["type"], column["name"])
            physical[column["name"]] = Physical(needs=tuple(answer_needs), from_=Layout(answer=column["name"]))
        elif column["kind"] == "physical":
            needs, layout = column_layout(column["name"], column["type"], flat, column["name"])
            if column["name"] == "model" and options.get(MODEL) and needs == ["model"]:
                # A failed request or an unreadable body still belongs to the table's model.
                layout = dataclasses.replace(layout, default=str(options.get(MODEL)))
            physical[column["name"]] = Physical(needs=tuple(sorted(set(needs))), from_=layout)

    rowtime = declared.get("watermark")
    require_created = rowtime is not None and rowtime in physical and "created" in physical[rowtime].needs
    metadata = metadata_for(mode)
    api_key = api_key_of(options) if mode == "request" else None
    parse_function = ParseFunctionPlan(name, options, profile, require_created)
    request = None
    if mode == "request":
        request = TableRequest(
            client=client_spec(options, profile, api_key, answer_body),
            columns=tuple(NameType(*c) for c in REQUEST_COLUMNS),
            output_mode=options.get(REQUEST_OUTPUT_MODE),
            on_failure=options.get(RETRY_ON_FAILURE),
            store=store_of(options),
            # The async operator's queue: requests on the wire plus those waiting for a slot or in backoff. Its
            # timeout is a backstop only: every request ends by its own deadline.
            capacity=options.queue_size,
            timeout_ms=round((options.get(RETRY_DEADLINE) + 60.0) * 1000),
        )
        parse_inputs = (NameType("_body", "BYTES"), NameType("_request_error", "STRING"))
    else:
        parse_inputs = (NameType("_body", "BYTES"), NameType("_source_line", "BIGINT"))
    made = TablePlan(
        version=PLAN_VERSION,
        mode=mode,
        bounded=_bounded(options),
        source=_source(name, options),
        flat=tuple(Column(n, t) for n, t in [*flat.items(), *INTERNAL_COLUMNS]),
        parse_internal=tuple(n for n, _ in INTERNAL_COLUMNS),
        physical=physical,
        metadata=tuple(MetadataKey(key=m.key, type=m.type, from_=Layout(column=m.column)) for m in metadata),
        settings=_settings(options),
        plan=parse_function.document(),
        answer=answer,
        parse_inputs=parse_inputs,
        native=native_parse(options, profile, require_created, declared.get("flink") or {}),
        request=request,
    )
    return to_json(made)
