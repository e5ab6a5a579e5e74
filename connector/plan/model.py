"""The plan of a model with 'provider' = 'dspark-vllm' (`CREATE MODEL ... WITH ('provider' = 'dspark-vllm')`,
used by ML_PREDICT): the prompt made of each INPUT row, the row's body options, the OUTPUT columns' layouts."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from connector.errors import OptionsError
from connector.options import (
    MODEL,
    PARSE_BACKEND,
    PROFILE,
    PROMPT_TEMPLATE,
    REQUEST_API,
    REQUEST_ROUTING_KEY_COLUMN,
    RETRY_ON_FAILURE,
    SYSTEM_PROMPT,
    validate_model,
)
from connector.params import REQUEST_PARAMS
from connector.plan.answer import answer_fields, plan_answer
from connector.plan.contract import PLAN_VERSION, REQUEST_COLUMNS, client_spec
from connector.plan.layout import column_layout, refuse_not_null, sql_root
from connector.plan.metadata import metadata_for
from connector.plan.parse import core_columns, core_parse
from connector.plan.records import (
    Answer,
    BodyColumn,
    Layout,
    ModelPlan,
    ModelRequest,
    NameType,
    Output,
    Prompt,
    Rule,
    TemplatePart,
    to_json,
)
from connector.plan.request import api_key_of, store_of
from connector.profiles import load_profile
from connector.types.answer import instruction
from connector.types.columns import output_schema
from connector.types.flink_types import arrow_to_flink_sql

__all__ = ["ROW_BODY_OPTIONS", "model_plan"]

# Request body options an INPUT column may set per row (vLLM's names): those sent under their own name.
# 'logprobs' is not one: a chat request sends it as two fields (connector.params.body_defaults).
ROW_BODY_OPTIONS = ("model", *(name for name in REQUEST_PARAMS if name != "logprobs"))
_ROW_BODY_ROOTS = {
    "int": ("BIGINT", "INTEGER", "SMALLINT", "TINYINT"),
    "float": ("DOUBLE", "FLOAT", "DECIMAL", "BIGINT", "INTEGER", "SMALLINT", "TINYINT"),
    "list[str]": ("ARRAY",),
}


def _is_messages(ftype: Mapping[str, Any]) -> bool:
    """ARRAY<ROW<role STRING, content STRING>>: the chat messages of a request, as they are."""
    sql = str(ftype["sql"]).replace("VARCHAR(2147483647)", "STRING").replace(" NOT NULL", "")
    return re.fullmatch(r"ARRAY<ROW<`?role`? STRING, `?content`? STRING>>", sql) is not None


def _template(text: str, inputs: Sequence[str]) -> list[list[Any]]:
    """'prompt.template' as [literal, INPUT column index or None] parts; a name that is no INPUT column refused."""
    import string

    parts: list[list[Any]] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise OptionsError(
            f"Option 'prompt.template' cannot be read ({exc}): name INPUT columns as '{{column}}', write braces as "
            "'{{' and '}}'."
        ) from None
    for literal, name, spec, conversion in parsed:
        if literal and parts and parts[-1][1] is None:
            parts[-1][0] += literal  # '{{' and '}}' end a literal part of their own
        elif literal:
            parts.append([literal, None])
        if name is None:
            continue
        if spec or conversion:
            raise OptionsError(
                f"Option 'prompt.template' has '{{{name}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}}': name an INPUT column only, as '{{column}}'."
            )
        if name not in inputs:
            raise OptionsError(
                f"Option 'prompt.template' names '{{{name}}}', which is not an INPUT column of the model; its INPUT "
                f"columns: {', '.join(inputs) or '(none)'}."
            )
        parts.append(["", inputs.index(name)])
    return parts


# The INPUT types whose value is an id as it is written (its text, or its bytes): what 'request.routing.key-column'
# may name. Not a collection or a row (no stable text), nor a float or a time (no id).
_ROUTING_KEY_ROOTS = ("VARCHAR", "CHAR", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "DECIMAL", "BINARY", "VARBINARY")


def _routing_key(column: str | None, inputs: Sequence[str], types: Mapping[str, Mapping[str, Any]]) -> int | None:
    """'request.routing.key-column': the index of the INPUT column whose value routes a row (None: unset)."""
    if column is None:
        return None
    if column not in inputs:
        raise OptionsError(
            f"Option 'request.routing.key-column' names '{column}', which is not an INPUT column of the model; its "
            f"INPUT columns: {', '.join(inputs) or '(none)'}."
        )
    if types[column].get("root") not in _ROUTING_KEY_ROOTS:
        raise OptionsError(
            f"INPUT column '{column}' of 'request.routing.key-column' is {types[column]['sql']}: declare it STRING, "
            "an integer or BYTES (a session or user id)."
        )
    return inputs.index(column)


def model_plan(declared: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of a model with 'provider' = 'dspark-vllm' (`io.dspark.vllm.sql.DsparkVllmModelFactory`).

    `declared`: `{"model": NAME, "options": {...}, "input": [columns], "output": [columns]}` (columns as a table's:
    name and type). The same planning as a table's: the options (`validate_model`: the table's keys and
    defaults), the request step's settings (`client_spec`), the native core's document, and each OUTPUT column's
    layout (`from`), a column of the profile or a metadata key of the registry. The prompt: `prompt`, how each
    request's messages are made from the INPUT row (see docs/flink.md).
    """
    name = str(declared["model"])
    options = validate_model(declared["options"])
    if options.get(PARSE_BACKEND) == "gpu":
        raise OptionsError(
            "Option 'parse.backend' = 'gpu' is not available for a model: a model parses in the TaskManager's JVM "
            "with the native core; remove it or set 'cpu'. To parse on the GPU, ask the model for `raw.body` and "
            'parse it with parse_<profile> after ML_PREDICT (docs/flink.md, "Parsing on the GPU with ML_PREDICT").'
        )
    profile = load_profile(options.get(PROFILE))
    flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    metadata = {m.key: m for m in metadata_for("request")}
    fields = answer_fields([c for c in declared["output"] if str(c["name"]) not in metadata], flat, options.raw)
    answer: Answer | None = None
    answer_body: dict[str, Any] | None = None
    if fields:
        profile, answer, answer_body = plan_answer(f"model '{name}'", profile, fields, options)
        flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    answered = {f.name for f in fields}

    inputs = [str(c["name"]) for c in declared["input"]]
    types = {str(c["name"]): c["type"] for c in declared["input"]}
    chat = options.get(REQUEST_API) != "completions"
    messages = [n for n in inputs if _is_messages(types[n])]
    template = options.get(PROMPT_TEMPLATE)
    system = options.get(SYSTEM_PROMPT)
    # A column the template uses is part of the prompt, not a body option too: `{n}` in a question is no
    # number of choices to pay for.
    in_template = set()
    if template is not None and not messages:
        in_template = {inputs[part[1]] for part in _template(template, inputs) if part[1] is not None}
    body_columns_ = []
    for column in inputs:
        if column not in ROW_BODY_OPTIONS or column in in_template:
            continue
        kind = "string" if column == "model" else REQUEST_PARAMS[column].type
        root = types[column].get("root")
        allowed = ("VARCHAR", "CHAR") if kind == "string" else _ROW_BODY_ROOTS.get(kind, ())
        if root not in allowed:
            raise OptionsError(
                f"INPUT column '{column}' sets the request's '{column}' for its row: declare it "
                f"{'STRING' if kind == 'string' else {'int': 'BIGINT', 'float': 'DOUBLE'}.get(kind, 'ARRAY<STRING>')}."
            )
        # The row's value is held to the option's rule in the JVM (an invalid one is an error row, not sent).
        rule = None if kind == "string" else Rule(**REQUEST_PARAMS[column].as_rule())
        body_columns_.append(BodyColumn(column, inputs.index(column), kind, rule))
    prompt: dict[str, Any] = {"chat": chat, "system": system, "template": None, "messages": None, "column": None}
    if len(messages) > 1:
        raise OptionsError(f"INPUT columns {', '.join(messages)} are all chat messages: declare one.")
    if messages:
        if not chat:
            raise OptionsError(
                f"INPUT column '{messages[0]}' holds chat messages, which 'request.api' = 'completions' cannot send."
            )
        if template is not None or system is not None:
            raise OptionsError(
                f"INPUT column '{messages[0]}' holds the chat messages, sent as they are: remove 'prompt.template' "
                "and 'system-prompt' (or put the system message in the column)."
            )
        prompt["messages"] = inputs.index(messages[0])
    elif template is not None:
        prompt["template"] = _template(template, inputs)
    else:
        texts = [n for n in inputs if n not in ROW_BODY_OPTIONS and types[n].get("root") in ("VARCHAR", "CHAR")]
        if len(texts) != 1:
            raise OptionsError(
                "The model needs 'prompt.template' to make a request of its INPUT columns "
                f"({', '.join(inputs)}): e.g. 'Review this {{{inputs[0] if inputs else 'column'}}}'. Without it, "
                "the INPUT has one STRING column (the prompt) or one ARRAY<ROW<role STRING, content STRING>> "
                "(the chat messages)."
            )
        prompt["column"] = inputs.index(texts[0])
    if system is not None and not chat:
        raise OptionsError("Option 'system-prompt' needs 'request.api' = 'chat'; remove it or put it in the template.")
    if answer is not None and answer_body is None:  # 'answer.constraint' = 'prompt': the prompt asks for the schema
        said = instruction(answer.schema)
        if prompt["messages"] is not None:
            raise OptionsError(
                f"INPUT column '{messages[0]}' holds the chat messages, sent as they are: with 'answer.constraint' = "
                "'prompt' put the schema in them yourself, or let the server keep to it ('response-format')."
            )
        if chat:
            prompt["system"] = said if system is None else f"{system}\n\n{said}"
        else:
            parts = prompt["template"] or [["", prompt["column"]]]
            prompt["template"] = [[f"{said}\n\n", None], *parts]
            prompt["column"] = None

    outputs = []
    needs: list[list[str]] = []  # per output, the flat columns it reads
    for column in declared["output"]:
        cname = str(column["name"])
        if cname in metadata:
            m = metadata[cname]
            root = column["type"].get("root")
            want = sql_root(m.type)
            if root != want:
                raise OptionsError(f"OUTPUT column '{cname}' is the metadata key '{cname}': declare it {m.type}.")
            outputs.append(Output(name=cname, from_=Layout(column=m.column)))
            needs.append([m.column])
            continue
        if cname in answered:
            refuse_not_null(column["type"], cname)
            outputs.append(Output(name=cname, from_=Layout(answer=cname)))
            continue
        reads, layout = column_layout(cname, column["type"], flat, cname)
        needs.append(reads)
        if cname == "model" and options.get(MODEL) and layout == Layout(column="model"):
            layout = dataclasses.replace(layout, default=str(options.get(MODEL)))
        outputs.append(Output(name=cname, from_=layout))

    api_key = api_key_of(options)
    template_parts = None if prompt["template"] is None else tuple(TemplatePart(*p) for p in prompt["template"])
    made = ModelPlan(
        version=PLAN_VERSION,
        model=name,
        request=ModelRequest(
            client=client_spec(options, profile, api_key, answer_body),
            columns=tuple(NameType(*c) for c in REQUEST_COLUMNS),
            on_failure=options.get(RETRY_ON_FAILURE),
            store=store_of(options),
            routing_key=_routing_key(options.get(REQUEST_ROUTING_KEY_COLUMN), inputs, types),
        ),
        prompt=Prompt(
            chat=prompt["chat"],
            system=prompt["system"],
            template=template_parts,
            messages=prompt["messages"],
            column=prompt["column"],
        ),
        body_columns=tuple(body_columns_),
        outputs=tuple(outputs),
        answer=answer,
        native=core_parse(options, profile, False, core_columns(profile, needs, answer)),
    )
    return to_json(made)
