"""Plans a 'dspark-vllm' table for the Java factory: options and columns checked, the pipeline described.

The factory (`io.dspark.vllm.flink.DsparkVllmTableFactory`, in the jar shipped with this package) runs

    python -m connector.flink.planner  < declared-table.json  > plan.json

on the client when Flink plans a query over the table (the same way Flink runs Python to load a Python UDF),
with `python.client.executable`. Input: the table's options, its resolved columns, its watermark and `flink`, the
job's settings the plan depends on. Output: either `{"error": "..."}`, a message for the user (Flink raises it as
a ValidationException), or the plan:

- `source`: what the bodies (replay) or prompts (request mode) come from, as data the jar builds a DataStream
  of (`io.dspark.vllm.flink.Sources`), no SQL: `kind` `replay` (`path`, `monitor_interval_ms` or none: the
  lines of the files, `_body`/`_source`/`_source_line`: the line in its file), `prompts` (`path`: the lines
  of the files, `_prompt`/`_request_id`, the id made of the file, the line number and the line) or `rate`
  (`rate`, `count` or -1 for no end,
  `template` whose `{n}` is the number, `table`: the ids are `<table>-<n>`);
- `version`: `connector.flink.contract.PLAN_VERSION`, checked by the jar;
- `request`: the request step (Java async I/O, `io.dspark.vllm.flink.RequestStep`): the client's settings
  (`contract.client_spec`), the columns it adds, the output mode, what a failed request does, the operator's
  capacity and backstop timeout;
- `parse_inputs`, `flat`: the parse function's arguments and every column it can produce (Flink SQL types);
- `physical`: for each declared physical column, the flat columns it needs and its layout `from`; `metadata`:
  the readable keys, their types and layouts. A layout is what the JVM makes the declared row of, with no SQL
  (`io.dspark.vllm.flink.RowShape`): `{"column": NAME}` (a flat, internal or input column, written as the
  declared type: Flink's CAST where that is another, `io.dspark.vllm.flink.Casts`; TIMESTAMP_LTZ(3) from BIGINT
  epoch milliseconds; `default`: a value for NULL), or `{"row": [{"name", "from"}, ...]}`;
- `settings`: the Flink options of this table's own Python operators; `bounded`;
- `native`: the parse step's native core (its plan document for every body column, the columns it makes and
  their types, the batching), planned on both routes, and `why` the step runs in Python, else in the JVM
  (`_native_parse`: 'auto' follows what the job's configuration, `flink`, declares of its TaskManagers);
- `plan`: what the Python parse function is built from on the workers (`TablePlan.document()`: the table's
  options less its secrets, the profile's files as JSON, whether `created` is required), JSON like the rest;
  `connector.flink.runtime` rebuilds the `TablePlan` from it, with the flat columns the query really reads.

Where the parse step runs in Python, the factory asks once more, after projection push-down, with
`{"parse_function": {"plan": ..., "columns": [...]}}`, and gets `{"payload": ...}`: the Python function as
PyFlink carries one, a pickle (of the call `parse_function(plan as JSON text, columns)`, made by
`connector.flink.runtime.function_payload`), base64. That pickle is PyFlink's format for a Python function, not
ours: nothing in it but the call and its two JSON strings.

The plans are made of the typed records of `connector.flink.plan_types` (a key the declaration has not cannot be
written; `to_json` writes them), and the jar reads them with the reader generated from that declaration.

Pure code: no pyflink, no JVM; the factory does the Flink side.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import hashlib
import json
import os
import re
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from connector.decode.native import NativePlan
from connector.errors import DsparkError, OptionsError
from connector.flink.contract import PARSE_INTERNAL, PLAN_VERSION, REQUEST_COLUMNS, client_spec
from connector.flink.metadata import METADATA, metadata_for
from connector.flink.plan_types import (
    Answer,
    BodyColumn,
    Column,
    FormatPlan,
    Layout,
    MetadataKey,
    ModelPlan,
    ModelRequest,
    NameType,
    NativeParse,
    Output,
    Physical,
    Prompt,
    RowField,
    Rule,
    Source,
    Store,
    TableRequest,
    TemplatePart,
    to_json,
)
from connector.flink.plan_types import (
    AnswerField as PlanAnswerField,
)
from connector.flink.plan_types import TablePlan as TablePlanRecord
from connector.flink.table_plan import TablePlan
from connector.options import (
    ANSWER_CONSTRAINT,
    ANSWER_STRING_CHARACTERS,
    API_KEY,
    API_KEY_ENV,
    API_KEY_FILE,
    ARROW_BATCH,
    BUNDLE_SIZE,
    BUNDLE_TIME,
    MODE,
    MODEL,
    PARSE_BACKEND,
    PROFILE,
    PROMPT_TEMPLATE,
    PROMPTS_COUNT,
    PROMPTS_PATH,
    PROMPTS_RATE,
    PROMPTS_TEMPLATE,
    REPLAY_MONITOR_INTERVAL,
    REPLAY_PATH,
    REQUEST_API,
    REQUEST_CACHE,
    REQUEST_OUTPUT_MODE,
    REQUEST_PARAM_OPTIONS,
    REQUEST_ROUTING_KEY_COLUMN,
    REQUEST_STORE,
    RETRY_DEADLINE,
    RETRY_ON_FAILURE,
    SYSTEM_PROMPT,
    Options,
    validate,
    validate_model,
)
from connector.params import REQUEST_PARAMS
from connector.profiles import Profile, load_profile, profile_of_document
from connector.schema.answer import AnswerField, answer_options, answer_profile_data, answer_schema, instruction
from connector.schema.columns import body_columns, output_schema
from connector.schema.flink_types import arrow_to_flink_sql

__all__ = [
    "INTERNAL_COLUMNS",
    "TablePlan",
    "format_plan",
    "model_plan",
    "plan",
    "request_id_of",
    "request_ids_of",
    "sql_literal",
]

# Produced by the parse function beside the profile's columns (see connector.flink.frames).
INTERNAL_COLUMNS = PARSE_INTERNAL


def request_id_of(file: str | os.PathLike[str], line_number: int, line: str) -> str:
    """The request id of line `line_number` (from 1) of a 'prompts.path' file: the hex MD5 of
    `<file>\n<line number>\n<line>` (io.dspark.vllm.flink.FileLines.requestId, which makes it in the job), the
    file a local one's absolute path or another's URI. Two identical lines are two ids."""
    name = os.fspath(file)
    if name.startswith("file:") or "://" not in name:  # local: the absolute path, as Flink's Path makes it
        name = os.path.abspath(urllib.parse.urlsplit(name).path if name.startswith("file:") else name)
    return hashlib.md5(f"{name}\n{line_number}\n{line}".encode()).hexdigest()


def request_ids_of(path: str | os.PathLike[str]) -> list[str]:
    """The request ids of every line of a local 'prompts.path' file, in order (`request_id_of`)."""
    with open(path, "rb") as file:
        lines = file.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a file ending in a newline has no empty last line
    return [
        request_id_of(path, n, line.removesuffix(b"\r").decode("utf-8", "replace"))
        for n, line in enumerate(lines, start=1)
    ]


def sql_literal(text: str) -> str:
    """A Flink SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _same_type(declared: str, produced: str) -> bool:
    """Whether a declared type (as Flink writes it: `ARRAY<VARCHAR(2147483647)>`) is a flat column's type (as
    the planner writes it: `ARRAY<STRING>`)."""

    def canonical(sql: str) -> str:
        return sql.replace("VARCHAR(2147483647)", "STRING").replace("VARBINARY(2147483647)", "BYTES")

    return canonical(declared.removesuffix(" NOT NULL")) == canonical(produced)


# The declared types a flat column may be cast to, by the flat column's type: those whose CAST cannot fail at
# run time. Text to a number, a boolean or a time fails on the first value that is not one (`id INT` planned,
# then the job failed on 'cmpl-0'), and a number to BOOLEAN is TRUE for any but 0 (a token count read as TRUE).
_NUMBERS = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT", "DECIMAL")
_TEXT = ("VARCHAR", "CHAR")
_TABLE_CASTS = {
    "STRING": _TEXT,
    "BIGINT": _NUMBERS + _TEXT,
    "DOUBLE": _NUMBERS + _TEXT,
    "BOOLEAN": ("BOOLEAN", *_TEXT),
    "TIMESTAMP(3)": (
        "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "DATE", "TIME_WITHOUT_TIME_ZONE", *_TEXT
    ),
}  # fmt: skip
# Flink's serializable type names (`LogicalType.asSerializableString`) and their type roots, for array elements.
_SQL_ROOTS = {
    "STRING": "VARCHAR", "BYTES": "VARBINARY", "INT": "INTEGER", "TIMESTAMP": "TIMESTAMP_WITHOUT_TIME_ZONE",
    "TIMESTAMP_LTZ": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "TIME": "TIME_WITHOUT_TIME_ZONE",
}  # fmt: skip


def _sql_root(sql: str) -> str:
    """The type root of a type as Flink writes it: `VARCHAR(2147483647)` VARCHAR, `INT` INTEGER."""
    if " WITH LOCAL TIME ZONE" in sql:
        return "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
    name = re.split(r"[(<\s]", sql.strip(), maxsplit=1)[0].upper()
    return _SQL_ROOTS.get(name, name)


def _castable(flat_type: str, declared: str, root: str) -> bool:
    """Whether a flat column of `flat_type` cast to the declared type (`declared`, of type root `root`) cannot
    fail at run time (`_TABLE_CASTS`); an array's elements by the same rule."""
    if flat_type.startswith("ARRAY<"):
        if root in _TEXT:
            return True
        if root != "ARRAY" or not declared.startswith("ARRAY<"):
            return False
        element = declared.removeprefix("ARRAY<").removesuffix(" NOT NULL").removesuffix(">")
        inner = flat_type.removeprefix("ARRAY<").removesuffix(">")
        return _castable(inner, element, _sql_root(element))
    return root in _TABLE_CASTS.get(flat_type, (root,))


def _column_layout(
    name: str, ftype: Mapping[str, Any], flat: Mapping[str, str], where: str
) -> tuple[list[str], Layout]:
    """The flat columns a declared column (or ROW field) reads, and its layout (`column`, cast to the declared
    type by the parse step, `io.dspark.vllm.flink.Casts`, or `row`: its fields' layouts)."""
    declared = str(ftype["sql"])
    if " NOT NULL" in declared:
        # An error row (a body that cannot be read, a failed request) has no value for it: Flink's not-null
        # enforcer would fail the job on the first one.
        raise OptionsError(
            f"Column '{where}' is declared NOT NULL, but an error row (a body that cannot be read, a failed "
            "request) has no value for it: declare it nullable (a PRIMARY KEY makes its columns NOT NULL: declare "
            "the key on the sink), and filter on 'error.reason' IS NULL where a query needs values."
        )
    if ftype.get("root") == "ROW":
        needs: list[str] = []
        fields: list[RowField] = []
        for field in ftype.get("fields", []):
            part_needs, layout = _column_layout(field["name"], field["type"], flat, f"{where}.{field['name']}")
            needs += part_needs
            fields.append(RowField(name=field["name"], from_=layout))
        return needs, Layout(row=tuple(fields))
    if name not in flat:
        known = ", ".join(sorted(flat))
        raise OptionsError(
            f"Column '{where}' is not produced by this profile; declare one of: {known} "
            "(or a ROW whose fields are among them), or a METADATA column."
        )
    _check_cast(flat[name], ftype, where)
    return [name], Layout(column=name)


def _check_cast(flat_type: str, ftype: Mapping[str, Any], where: str) -> bool:
    """Whether a column the profile makes as `flat_type` is declared as that type (True) or as one the parse step
    casts it to (False, `io.dspark.vllm.flink.Casts`); raises where the cast could fail or mislead."""
    sql_type = str(ftype["sql"]).removesuffix(" NOT NULL")
    root = str(ftype.get("root") or _sql_root(sql_type))
    same = _same_type(sql_type, flat_type)
    if not _castable(flat_type, sql_type, root) or (flat_type.startswith("MAP<") and not same):
        text = "" if flat_type == "STRING" or flat_type.startswith("MAP<") else " (or STRING)"
        raise OptionsError(
            f"Column '{where}' is {flat_type} in this profile; declared {sql_type}, its CAST would fail or mislead "
            f"at run time: declare it {flat_type}{text}."
        )
    return same


def _source(table: str, options: Options) -> Source:
    """What the jar builds the internal source from (io.dspark.vllm.flink.Sources): data, no SQL."""
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


# Schemes of Flink's file systems and Kafka: a scheme close to one of them (and none itself) is a typo, which
# the store would otherwise meet only on a TaskManager (the job then runs without a store). Another scheme is a
# file system plugin's, which only the TaskManagers can tell.
_STORE_SCHEMES = ("kafka", "file", "s3", "s3a", "s3p", "hdfs", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "viewfs")


def _store(options: Options) -> Store | None:
    """The request step's response store ('request.store', 'request.cache'), or None; a URI that names no store
    (a typo in its scheme, a Kafka topic not written kafka://host:port[,host:port]/topic) refused."""
    uri = options.get(REQUEST_STORE)
    if uri is None:
        return None
    scheme = urllib.parse.urlsplit(str(uri)).scheme.lower() if "://" in str(uri) else ""
    if scheme and scheme not in _STORE_SCHEMES:
        close = difflib.get_close_matches(scheme, _STORE_SCHEMES, n=1, cutoff=0.75)
        if close:
            raise OptionsError(
                f"Option 'request.store' = {str(uri)!r} starts with '{scheme}://': did you mean '{close[0]}://'? "
                "(a folder of Flink's file systems, or kafka://host:port[,host:port]/topic)"
            )
    if scheme == "kafka":
        rest = str(uri)[len("kafka://") :].split("?", 1)[0]
        host, _, topic = rest.partition("/")
        if not host or not topic or "/" in topic:
            raise OptionsError(
                f"Option 'request.store' = {str(uri).split('?', 1)[0]!r} is not kafka://host:port[,host:port]/topic "
                "(Kafka client settings may follow after '?')."
            )
    ttl = options.get(REQUEST_CACHE)
    return Store(uri=str(uri), cache_ttl_ms=0 if ttl is None else max(1, round(ttl * 1000)))


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


# An API key file is a secret of a few hundred bytes: read no more than this (a wrong path such as a device or a
# large file must not fill the client's memory).
_API_KEY_FILE_LIMIT = 64 * 1024


def _header_value(text: str) -> bool:
    """What the request step can send as a header value (io.dspark.vllm.request.Requester.headerValue):
    visible ASCII, space, tab and obs-text; no CR, LF or other control characters."""
    return all(not ((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F or ord(c) > 0xFF) for c in text)


def _api_key(options: Options) -> str | None:
    key, where = _read_api_key(options)
    if key is not None and not _header_value(key):
        raise OptionsError(
            f"The API key from {where} holds characters an HTTP header cannot carry (a line break, another control "
            "character or a character beyond Latin-1); give the key alone."
        )
    return key


def _read_api_key(options: Options) -> tuple[str | None, str]:
    path = options.get(API_KEY_FILE)
    if path is not None:
        where = f"'api-key.file' = '{path}'"
        try:
            with open(path, "rb") as file:
                data = file.read(_API_KEY_FILE_LIMIT + 1)
        except OSError as exc:
            raise OptionsError(
                f"Option 'api-key.file' = '{path}' cannot be read where the table is planned: {exc.strerror}."
            ) from None
        if len(data) > _API_KEY_FILE_LIMIT:
            raise OptionsError(
                f"Option 'api-key.file' = '{path}' is larger than an API key ({_API_KEY_FILE_LIMIT} bytes)."
            )
        try:
            key = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise OptionsError(f"Option 'api-key.file' = '{path}' is not text (UTF-8).") from None
        if not key:
            raise OptionsError(f"Option 'api-key.file' = '{path}' is empty.")
        return key, where
    name = options.get(API_KEY_ENV)
    if name is None:
        return options.get(API_KEY), "'api-key'"
    value = os.environ.get(name)
    if not value:
        raise OptionsError(
            f"Option 'api-key.env' names the environment variable '{name}', which is not set where the table is "
            "planned (the SQL Client, the Gateway, the job's main): set it there, or give 'api-key'."
        )
    return value, f"the environment variable '{name}' ('api-key.env')"


def plan(declared: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of one declared table (see the module docstring); raises DsparkError for the user's mistakes."""
    name = str(declared["name"])
    options = validate(declared["options"])
    profile = load_profile(options.get(PROFILE))
    mode = options.get(MODE)
    flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    fields = _answer_fields([c for c in declared["columns"] if c["kind"] == "physical"], flat, options.raw)
    answer: Answer | None = None
    answer_body: dict[str, Any] | None = None
    if fields:
        profile, answer, answer_body = _answer(f"table '{name}'", profile, fields, options)
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
            if " NOT NULL" in str(column["type"]["sql"]):
                _column_layout(column["name"], column["type"], flat, column["name"])  # refused, as any NOT NULL
            physical[column["name"]] = Physical(needs=tuple(answer_needs), from_=Layout(answer=column["name"]))
        elif column["kind"] == "physical":
            needs, layout = _column_layout(column["name"], column["type"], flat, column["name"])
            if column["name"] == "model" and options.get(MODEL) and needs == ["model"]:
                # A failed request or an unreadable body still belongs to the table's model.
                layout = dataclasses.replace(layout, default=str(options.get(MODEL)))
            physical[column["name"]] = Physical(needs=tuple(sorted(set(needs))), from_=layout)

    rowtime = declared.get("watermark")
    require_created = rowtime is not None and rowtime in physical and "created" in physical[rowtime].needs
    metadata = metadata_for(mode)
    api_key = _api_key(options) if mode == "request" else None
    table_plan = TablePlan(name, options, profile, require_created)
    request = None
    if mode == "request":
        request = TableRequest(
            client=client_spec(options, profile, api_key, answer_body),
            columns=tuple(NameType(*c) for c in REQUEST_COLUMNS),
            output_mode=options.get(REQUEST_OUTPUT_MODE),
            on_failure=options.get(RETRY_ON_FAILURE),
            store=_store(options),
            # The async operator's queue: requests on the wire plus those waiting for a slot or in backoff. Its
            # timeout is a backstop only: every request ends by its own deadline.
            capacity=options.queue_size,
            timeout_ms=round((options.get(RETRY_DEADLINE) + 60.0) * 1000),
        )
        parse_inputs = (NameType("_body", "BYTES"), NameType("_request_error", "STRING"))
    else:
        parse_inputs = (NameType("_body", "BYTES"), NameType("_source_line", "BIGINT"))
    made = TablePlanRecord(
        version=PLAN_VERSION,
        mode=mode,
        bounded=_bounded(options),
        source=_source(name, options),
        flat=tuple(Column(n, t) for n, t in [*flat.items(), *INTERNAL_COLUMNS]),
        parse_internal=tuple(n for n, _ in INTERNAL_COLUMNS),
        physical=physical,
        metadata=tuple(MetadataKey(key=m.key, type=m.type, from_=Layout(column=m.column)) for m in metadata),
        settings=_settings(options),
        plan=table_plan.document(),
        answer=answer,
        parse_inputs=parse_inputs,
        native=_native_parse(options, profile, require_created, declared.get("flink") or {}),
        request=request,
    )
    return to_json(made)


def gpu_task_managers(flink: Mapping[str, str]) -> bool:
    """Whether the job's configuration declares GPU TaskManagers, as Flink's external-resource framework does:
    'external-resources' names `gpu` and 'external-resource.gpu.amount' is above 0 (docker/flink-conf/gpu.yaml;
    a Kubernetes deployment sets the same keys)."""
    names = re.split(r"[;,]", flink.get("external-resources", "").strip().strip("[]"))
    try:
        amount = float(flink.get("external-resource.gpu.amount", "0"))
    except ValueError:
        amount = 0.0
    return "gpu" in {n.strip().strip("'\"") for n in names} and amount > 0


def _native_parse(options: Options, profile: Profile, require_created: bool, flink: Mapping[str, str]) -> NativeParse:
    """The parse step: in the JVM (`io.dspark.vllm.engine.ParseOperator`, the native core through JNI), or `why`
    it runs in Python (the parse function, libcudf, its leftovers to the native core); the core's part is planned
    either way.

    'gpu' runs in Python; 'cpu' in the JVM; 'auto' in Python where the job's configuration declares GPU
    TaskManagers (`gpu_task_managers`), else in the JVM: the machine that plans the query (a SQL Gateway, a
    laptop) says nothing of the TaskManagers. Each parse step decides the rest where it runs, at open: the
    Python function takes libcudf where its worker has the GPU backend, else the native core; the JVM step on a
    TaskManager with a GPU says `gpu_unused` once. The native core makes every column of a profile: the body's,
    the content properties' (their x-extract patterns too) and content_error.
    """
    backend = options.get(PARSE_BACKEND)
    core = _core_parse(options, profile, require_created)
    if backend == "gpu":
        return dataclasses.replace(core, why="'parse.backend' = 'gpu' (libcudf runs in Python)")
    if backend == "auto" and gpu_task_managers(flink):
        return dataclasses.replace(
            core,
            why="'parse.backend' = 'auto' where the job's configuration declares GPU TaskManagers "
            "('external-resources' names gpu, 'external-resource.gpu.amount' > 0)",
        )
    # 'auto' for TaskManagers without a GPU: a TaskManager that has one says so once at WARNING, and counts it.
    unused = (
        "'parse.backend' = 'auto' and the job's configuration declares no GPU TaskManagers, so the native core "
        "parses on the CPU; to parse on this GPU, set 'external-resources' = 'gpu' and "
        "'external-resource.gpu.amount' = '1' in the job's configuration (or 'parse.backend' = 'gpu')"
    )
    return dataclasses.replace(core, gpu_unused=unused) if backend == "auto" else core


def _core_parse(options: Options, profile: Profile, require_created: bool) -> NativeParse:
    """The native core's part of a plan: its plan document for every body column, the columns it makes, the
    batching."""
    columns = body_columns(profile)
    made = [c.name for c in columns]
    if profile.content_properties:
        made += [p.name for p in profile.content_properties] + ["content_error"]
    types = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile)}
    return NativeParse(
        document=NativePlan.of(columns, profile.created_unit, profile.content_properties).document.decode(),
        columns=tuple(made),
        types=tuple(types[name] for name in made),  # as the core makes them (Flink SQL types)
        require_created=require_created,
        batch_size=options.batch_size,
        # A batch is parsed when full or this long after its first body: the latency the step adds at most.
        batch_ms=5 if options.get(MODE) == "request" else 50,
    )


# -- CREATE MODEL ... WITH ('provider' = 'dspark-vllm') ---------------------------------------------------------

# Request body options an INPUT column may set per row (vLLM's names): those sent under their own name.
# 'logprobs' is not one: a chat request sends it as two fields (connector.params.body_defaults).
ROW_BODY_OPTIONS = ("model", *(name for name in REQUEST_PARAMS if name != "logprobs"))
_ROW_BODY_ROOTS = {
    "int": ("BIGINT", "INTEGER", "SMALLINT", "TINYINT"),
    "float": ("DOUBLE", "FLOAT", "DECIMAL", "BIGINT", "INTEGER", "SMALLINT", "TINYINT"),
    "list[str]": ("ARRAY",),
}


def _of_profile(ftype: Mapping[str, Any], name: str, flat: Mapping[str, str]) -> bool:
    """Whether a declared column is the profile's: a flat column, or a ROW whose fields all are."""
    if name in flat:
        return True
    if ftype.get("root") != "ROW" or not ftype.get("fields"):
        return False
    return all(_of_profile(f["type"], str(f["name"]), flat) for f in ftype["fields"])


def _answer_fields(
    columns: Sequence[Mapping[str, Any]], flat: Mapping[str, str], settings: Mapping[str, str]
) -> list[AnswerField]:
    """The declared columns that are answer fields (not the profile's); refuses an 'answer.*' setting that names
    none of them."""
    fields = [
        AnswerField(str(c["name"]), c["type"], c.get("comment"))
        for c in columns
        if not _of_profile(c["type"], str(c["name"]), flat)
    ]
    answer_options(settings, fields)
    return fields


def _answer(
    owner: str, profile: Profile, fields: Sequence[AnswerField], options: Options
) -> tuple[Profile, Answer, dict[str, Any] | None]:
    """Answer fields (declared columns that are neither the profile's nor metadata keys, `connector.schema.answer`):
    the profile that reads them (the base profile with their schema as its content schema), the plan's "answer"
    (each field's schema, for the JVM's answer check, `io.dspark.vllm.flink.Answers`), and what the request
    carries to hold the server to the schema ('answer.constraint'; None: the prompt says it)."""
    near = [*(f.name for f in fields if f.name not in ANSWER_FACTS)]
    known = [n for n in _flat_names(profile) if n != "line"] + [m.key for m in METADATA]
    for name in near:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            raise OptionsError(
                f"Column '{name}' is neither a column of profile '{profile.name}' nor a metadata key, so it would be "
                f"an answer field: did you mean '{close[0]}'? (An answer field needs a name apart from the "
                "profile's columns and the metadata keys.)"
            )
    names = ", ".join(f.name for f in fields)
    if profile.content_properties:
        raise OptionsError(
            f"Columns {names} are answer fields (neither columns of profile '{profile.name}' nor metadata keys), "
            f"but profile '{profile.name}' has a content schema of its own "
            f"({', '.join(p.name for p in profile.content_properties)}): remove 'profile' (the openai body and "
            "your answer fields), or declare only the profile's columns."
        )
    schema = answer_schema(fields, options.raw, options.get(ANSWER_STRING_CHARACTERS))
    data = answer_profile_data(f"{profile.name}-answer", profile.name, schema)
    answered = profile_of_document([*profile.document(), {"path": f"the answer fields of {owner}", "data": data}])
    constraint = options.get(ANSWER_CONSTRAINT)
    body: dict[str, Any] | None
    if constraint == "response-format":
        strict = {"name": "answer", "schema": schema, "strict": True}
        body = {"response_format": {"type": "json_schema", "json_schema": strict}}
    elif constraint == "structured-outputs":
        body = {"structured_outputs": {"json": schema}}
    else:
        body = None
    plan = Answer(
        fields=tuple(PlanAnswerField(f.name, f.type["sql"], schema["properties"][f.name]) for f in fields),
        schema=schema,
        constraint=constraint,
        facts=tuple(ANSWER_FACTS),  # what the check reads beside the fields, in this order
        max_tokens=options.get(REQUEST_PARAM_OPTIONS["max_tokens"]),
    )
    return answered, plan, body


def _flat_names(profile: Profile) -> list[str]:
    return [f.name for f in output_schema(profile)]


# What the answer check reads beside the fields (io.dspark.vllm.flink.Answers): all made by the answer's profile.
ANSWER_FACTS = ("finish_reason", "refusal", "completion_tokens", "content_error")


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
    """The plan of a model with 'provider' = 'dspark-vllm' (`io.dspark.vllm.flink.DsparkVllmModelFactory`).

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
    fields = _answer_fields([c for c in declared["output"] if str(c["name"]) not in metadata], flat, options.raw)
    answer: Answer | None = None
    answer_body: dict[str, Any] | None = None
    if fields:
        profile, answer, answer_body = _answer(f"model '{name}'", profile, fields, options)
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
    for column in declared["output"]:
        cname = str(column["name"])
        if cname in metadata:
            m = metadata[cname]
            root = column["type"].get("root")
            want = _sql_root(m.type)
            if root != want:
                raise OptionsError(f"OUTPUT column '{cname}' is the metadata key '{cname}': declare it {m.type}.")
            outputs.append(Output(name=cname, from_=Layout(column=m.column)))
            continue
        if cname in answered:
            if " NOT NULL" in str(column["type"]["sql"]):
                _column_layout(cname, column["type"], flat, cname)  # refused, as any NOT NULL column
            outputs.append(Output(name=cname, from_=Layout(answer=cname)))
            continue
        _, layout = _column_layout(cname, column["type"], flat, cname)
        if cname == "model" and options.get(MODEL) and layout == Layout(column="model"):
            layout = dataclasses.replace(layout, default=str(options.get(MODEL)))
        outputs.append(Output(name=cname, from_=layout))

    api_key = _api_key(options)
    template_parts = None if prompt["template"] is None else tuple(TemplatePart(*p) for p in prompt["template"])
    made = ModelPlan(
        version=PLAN_VERSION,
        model=name,
        request=ModelRequest(
            client=client_spec(options, profile, api_key, answer_body),
            columns=tuple(NameType(*c) for c in REQUEST_COLUMNS),
            on_failure=options.get(RETRY_ON_FAILURE),
            store=_store(options),
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
        native=_core_parse(options, profile, False),
    )
    return to_json(made)


# -- 'format' = 'dspark-vllm' ---------------------------------------------------------------------------------

FORMAT_OPTIONS = ("profile", "on-error")
FORMAT_ON_ERROR = ("column", "skip", "fail")
# Where a rejected body's reason and field go with 'on-error' = 'column' (parse_batch's inline error columns).
FORMAT_ERROR_COLUMNS = ("error_reason", "error_field")


# The Flink type roots a declared column may have for a flat column of each type (the format converts).
def format_plan(declared: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of a table with 'format' = 'dspark-vllm' (`io.dspark.vllm.flink.DsparkVllmFormatFactory`).

    `declared["format"]`: the format's options without their 'dspark-vllm.' prefix. Declared physical columns
    are the profile's columns by name (the body's and the content properties', ROWs of them too, as in a
    'dspark-vllm' table) and, with
    'on-error' = 'column' (the default), `error_reason` (and `error_field`), which a rejected body fills.
    Answer: the native core's plan document for every column, the columns it makes, 'on-error'.
    """
    given = dict(declared["format"])
    unknown = sorted(
        k
        for k in set(given) - set(FORMAT_OPTIONS)
        if not (k.startswith("answer.") and (k.count(".") >= 2 or k == "answer.nullable"))
    )
    if unknown:
        raise OptionsError(
            f"'format' = 'dspark-vllm' has no option {', '.join(repr('dspark-vllm.' + k) for k in unknown)}; "
            f"it takes {', '.join(repr('dspark-vllm.' + k) for k in FORMAT_OPTIONS)}."
        )
    profile = load_profile(given.get("profile", "openai"))
    on_error = given.get("on-error", "column")
    if on_error not in FORMAT_ON_ERROR:
        raise OptionsError(
            f"Option 'dspark-vllm.on-error' is {on_error!r}: use one of {', '.join(map(repr, FORMAT_ON_ERROR))}."
        )
    flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    settings = {k: v for k, v in given.items() if k.startswith("answer.")}
    physical = [c for c in declared["columns"] if c["kind"] == "physical" and c["name"] not in FORMAT_ERROR_COLUMNS]
    fields = _answer_fields(physical, flat, settings)
    answer: Answer | None = None
    if fields:
        parsed = {
            ANSWER_CONSTRAINT.key: "response-format",
            ANSWER_STRING_CHARACTERS.key: "all",
            REQUEST_PARAM_OPTIONS["max_tokens"].key: None,
        }
        options = Options(parsed=parsed, given=frozenset(settings), raw=settings)
        profile, answer, _ = _answer("the format", profile, fields, options)
        flat = {f.name: arrow_to_flink_sql(f.type) for f in output_schema(profile) if f.name != "line"}
    columns = body_columns(profile)
    made = set(flat)
    names = []
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
            continue
        _format_column(column["name"], column["type"], flat, column["name"])
    if on_error == "column" and FORMAT_ERROR_COLUMNS[0] not in names:
        raise OptionsError(
            "'format' = 'dspark-vllm' gives a rejected body as a row with its reason: declare a column "
            "`error_reason STRING` (and `error_field STRING`), or set 'dspark-vllm.on-error' to 'skip' (no row, "
            "counted in the metric numRecordsInErrors) or 'fail' (the job fails)."
        )
    return to_json(
        FormatPlan(
            version=PLAN_VERSION,
            document=NativePlan.of(columns, profile.created_unit, profile.content_properties).document.decode(),
            columns=tuple(sorted(made)),
            types=tuple(flat[name] for name in sorted(made)),
            on_error=on_error,
            answer=answer,
        )
    )


def _format_column(name: str, ftype: Mapping[str, Any], flat: Mapping[str, str], where: str) -> None:
    root = ftype.get("root")
    if root == "ROW":
        for field in ftype.get("fields", []):
            _format_column(field["name"], field["type"], flat, f"{where}.{field['name']}")
        return
    if where in FORMAT_ERROR_COLUMNS:
        if root not in ("VARCHAR", "CHAR"):
            raise OptionsError(f"Column '{where}' holds a rejected body's reason: declare it STRING.")
        return
    if name not in flat:
        raise OptionsError(f"Column '{where}' is not made by this profile; declare one of: {', '.join(sorted(flat))}.")
    _check_cast(flat[name], ftype, where)  # the table's casts (the same RowShape makes the format's rows)


def parse_function_payload(question: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of a parse function in a Python worker: `plan` (a plan's `plan`) and the `columns` it
    produces, in their order."""
    from connector.flink.runtime import function_payload  # (pyflink's side: only for this question)

    payload = function_payload(question["plan"], [str(c) for c in question["columns"]])
    return {"payload": base64.b64encode(payload).decode("ascii")}


def main(argv: Sequence[str] | None = None) -> int:
    """Read the declared table from stdin, write the plan (or the user's error) to stdout as JSON."""
    try:
        declared = json.load(sys.stdin)
        answer: dict[str, Any]
        if "parse_function" in declared:
            answer = parse_function_payload(declared["parse_function"])
        elif "model" in declared:
            answer = model_plan(declared)
        else:
            answer = format_plan(declared) if "format" in declared else plan(declared)
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
    # Through the package, not `__main__`: the payload's pickle names connector.flink.runtime's function.
    from connector.flink.planner import main as _main

    sys.exit(_main())
