"""The plan, declared once: the records the planner (`connector.plan`) makes and the jar reads.

Three plans cross from Python to the JVM as JSON: a 'dspark-vllm' table's (`TablePlan`), a model's (`ModelPlan`)
and the format's (`FormatPlan`), made of the records below (the request step's settings `ClientSpec`, a row's
`Layout`, the native parse step `NativeParse`, the answer fields' `Answer`, ...). Each is a frozen dataclass; the
planner builds them and `to_json` writes them, one function for every record; `from_json` reads one back (a plan
the jar hands the planner again, for a scan's projection), as strictly as the jar does: no Python code reads a
plan key by name. The jar's side is generated from this module, not written by hand:

- `io.dspark.vllm.plan.Plan`: one final class per record, public final fields of the declared types;
- `io.dspark.vllm.plan.PlanReader`: `readTable`, `readModel`, `readFormat`, `readClientSpec` from a JsonNode, each
  refusing, in one line that names the key, a key the record has not, a key it needs and lacks, or a value of
  another type; and a plan of another version (`PLAN_VERSION`, `CLIENT_SPEC_VERSION`), once, there.

    python -m connector.plan.records --java DIR     (writes the two files into DIR)
    python -m connector.plan.records --check DIR    (exit 1, naming a stale file)

DIR is java/src/main/java/io/dspark/vllm/plan; tests/test_plan_types.py fails on a stale file.

A field's JSON key is its name (`from_` is "from"). `T | None` may be null; with `omit()` it is left out of the
JSON when None, and may be absent. A record marked `ARRAY` is written as a JSON array of its fields, in order
(the pairs and triples the plan has always carried). `JSON` is a value passed through as it is (a JSON schema,
the Python parse function's own document): the jar holds it as a JsonNode.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeAlias, TypeVar, Union

__all__ = [
    "CLIENT_SPEC_VERSION",
    "PLAN_VERSION",
    "JSON",
    "Answer",
    "AnswerField",
    "BodyColumn",
    "ClientSpec",
    "Column",
    "Concurrency",
    "CoreColumn",
    "FormatPlan",
    "Layout",
    "MetadataKey",
    "ModelPlan",
    "ModelRequest",
    "NameType",
    "NativeParse",
    "NativeRead",
    "Output",
    "Physical",
    "Prompt",
    "Routing",
    "Rule",
    "RowField",
    "Source",
    "Store",
    "TablePlan",
    "TableRequest",
    "TemplatePart",
    "Tls",
    "from_json",
    "java_sources",
    "to_json",
]


R = TypeVar("R")

# A value carried as it is (any JSON: a JSON schema, the parse function's document); the jar holds a JsonNode.
JSON: TypeAlias = Any


# The version of the plans' keys, and of the request step's settings (ClientSpec) in them: a jar refuses a plan of
# another version (PlanReader), so a client and a TaskManager of different releases never disagree silently.
PLAN_VERSION = 12
CLIENT_SPEC_VERSION = 2


def omit() -> Any:
    """A field left out of the JSON when it is None (and read as null when absent)."""
    return field(default=None, metadata={"omit": True})


# -- the request step ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Routing:
    mode: str  # "least-loaded" or "prefix"
    prefix_bytes: int
    load_bound: float
    resolve_interval_s: float


@dataclass(frozen=True)
class Tls:
    verify: bool
    ca_bundle: str | None
    client_cert: str | None
    client_key: str | None


@dataclass(frozen=True)
class Concurrency:
    initial: int
    min: int
    max: int
    adaptive: bool


@dataclass(frozen=True)
class ClientSpec:
    """How requests are sent (`connector.plan.contract.client_spec`; the jar's `RequestSpec`)."""

    VERSION: ClassVar[str] = "CLIENT_SPEC_VERSION"
    version: int
    url: str
    health_url: str
    urls: tuple[str, ...]
    health_urls: tuple[str, ...]
    routing: Routing
    headers: dict[str, str]
    body_prefix: str
    body_suffix: str
    timeout_s: float
    connect_timeout_s: float
    deadline_s: float
    max_attempts: int | None
    backoff_initial_s: float
    backoff_max_s: float
    max_retry_after_s: float
    hold_while_down: bool
    rate_limit: float | None
    max_body_bytes: int
    tls: Tls
    concurrency: Concurrency


@dataclass(frozen=True)
class NameType:
    """A column's name and Flink SQL type, as a pair `[name, type]`."""

    ARRAY: ClassVar[bool] = True
    name: str
    type: str


@dataclass(frozen=True)
class Store:
    uri: str
    cache_ttl_ms: int


@dataclass(frozen=True)
class TableRequest:
    client: ClientSpec
    columns: tuple[NameType, ...]
    output_mode: str
    on_failure: str
    store: Store | None
    capacity: int
    timeout_ms: int


@dataclass(frozen=True)
class ModelRequest:
    client: ClientSpec
    columns: tuple[NameType, ...]
    on_failure: str
    store: Store | None
    routing_key: int | None  # the INPUT column whose value routes a row ('request.routing.key-column')


# -- the parse step and the declared row -----------------------------------------------------------------------


@dataclass(frozen=True)
class CoreColumn:
    """A named column of the native core's result: `[name, type, item]`, its type code (the contract's `RESULT_*`)
    and, for a list, its items' (else None)."""

    ARRAY: ClassVar[bool] = True
    name: str
    type: str
    item: str | None


@dataclass(frozen=True)
class NativeRead:
    """What the native core reads for one query (`connector.plan.parse.native_read`): its plan document, narrowed
    to the core columns the query's row reads (with `explain`), handed to the core as it is; and the named
    columns of the core's result, in the core's order (its own verdict, reason and field follow them)."""

    VERSION: ClassVar[str] = "PLAN_VERSION"
    JAVA: ClassVar[str] = "NativeRead"
    version: int
    document: str
    columns: tuple[CoreColumn, ...]


@dataclass(frozen=True)
class NativeParse:
    """The native core's part of the parse step, planned on both routes; `why` the step runs in Python (else in
    the JVM); `gpu_unused`: 'auto' in the JVM, what a TaskManager with a GPU says once at open. `read`: what the
    core reads, where the planner knows the query's row (a model's); a table's comes when its scan is built
    (its projection: `connector.plan.parse.table_read`)."""

    read: NativeRead | None = omit()
    columns: tuple[str, ...] | None = omit()
    types: tuple[str, ...] | None = omit()
    require_created: bool | None = omit()
    batch_size: int | None = omit()
    batch_ms: int | None = omit()
    gpu_unused: str | None = omit()
    why: str | None = omit()


@dataclass(frozen=True)
class Layout:
    """What one declared column (or ROW field) is made of: exactly one of `column` (a flat, internal or input
    column; `default` for NULL), `row` (its fields' layouts) and `answer` (an answer field)."""

    UNION: ClassVar[tuple[str, ...]] = ("column", "row", "answer")
    column: str | None = omit()
    row: tuple[RowField, ...] | None = omit()
    answer: str | None = omit()
    default: str | None = omit()


@dataclass(frozen=True)
class RowField:
    name: str
    from_: Layout


@dataclass(frozen=True)
class Physical:
    needs: tuple[str, ...]
    from_: Layout


@dataclass(frozen=True)
class MetadataKey:
    key: str
    type: str
    from_: Layout


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class AnswerField:
    name: str
    type: str
    schema: JSON


@dataclass(frozen=True)
class Answer:
    """The answer fields the JVM checks (its answer check, `Answers` of the engine)."""

    fields: tuple[AnswerField, ...]
    schema: JSON
    constraint: str
    facts: tuple[str, ...]
    max_tokens: int | None


@dataclass(frozen=True)
class Source:
    """What a table's rows come from: `kind` "replay" (`path`, `monitor_interval_ms`), "prompts" (`path`) or
    "rate" (`rate`, `count`, `template`, `table`)."""

    kind: str
    path: str | None = omit()
    monitor_interval_ms: int | None = omit()
    rate: float | None = omit()
    count: int | None = omit()
    template: str | None = omit()
    table: str | None = omit()


# -- the three plans -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TablePlan:
    """A 'dspark-vllm' table's plan (see `connector.plan`'s docstring)."""

    VERSION: ClassVar[str] = "PLAN_VERSION"
    JAVA: ClassVar[str] = "Table"  # Plan.Table
    version: int
    mode: str
    bounded: bool
    source: Source
    flat: tuple[Column, ...]
    parse_internal: tuple[str, ...]
    physical: dict[str, Physical]
    metadata: tuple[MetadataKey, ...]
    settings: dict[str, str]
    plan: JSON
    answer: Answer | None
    parse_inputs: tuple[NameType, ...]
    native: NativeParse
    request: TableRequest | None = omit()


@dataclass(frozen=True)
class Rule:
    """What a request option's value must be (`connector.params.RequestParam.as_rule`)."""

    type: str
    rule: str
    min: float | None
    max: float | None
    above: bool
    below: bool


@dataclass(frozen=True)
class BodyColumn:
    """An INPUT column that sets a request option for its row: `[name, index, kind, rule]`."""

    ARRAY: ClassVar[bool] = True
    name: str
    index: int
    kind: str
    rule: Rule | None


@dataclass(frozen=True)
class TemplatePart:
    """Text, then the INPUT column at `column` (None: none): `[text, column]`."""

    ARRAY: ClassVar[bool] = True
    text: str
    column: int | None


@dataclass(frozen=True)
class Prompt:
    """How a request's messages are made of the INPUT row: one of `template`, `messages`, `column`."""

    chat: bool
    system: str | None
    template: tuple[TemplatePart, ...] | None
    messages: int | None
    column: int | None


@dataclass(frozen=True)
class Output:
    name: str
    from_: Layout


@dataclass(frozen=True)
class ModelPlan:
    """A model's plan (`connector.plan.model.model_plan`)."""

    VERSION: ClassVar[str] = "PLAN_VERSION"
    JAVA: ClassVar[str] = "Model"
    version: int
    model: str
    request: ModelRequest
    prompt: Prompt
    body_columns: tuple[BodyColumn, ...]
    outputs: tuple[Output, ...]
    answer: Answer | None
    native: NativeParse


@dataclass(frozen=True)
class FormatPlan:
    """The format's plan (`connector.plan.format.format_plan`)."""

    VERSION: ClassVar[str] = "PLAN_VERSION"
    JAVA: ClassVar[str] = "Format"
    version: int
    profile: JSON  # the profile's document (`Profile.document`), for what the core reads once projected
    physical: dict[str, Physical]  # per physical column, the core columns it reads
    columns: tuple[str, ...]
    types: tuple[str, ...]
    on_error: str
    answer: Answer | None


RECORDS: tuple[type, ...] = (
    Routing, Tls, Concurrency, ClientSpec, NameType, Store, TableRequest, ModelRequest, CoreColumn, NativeRead,
    NativeParse, Layout,
    RowField, Physical, MetadataKey, Column, AnswerField, Answer, Source, TablePlan, Rule, BodyColumn,
    TemplatePart, Prompt, Output, ModelPlan, FormatPlan,
)  # fmt: skip
ROOTS: Mapping[str, type] = {
    "Table": TablePlan, "Model": ModelPlan, "Format": FormatPlan, "ClientSpec": ClientSpec, "NativeRead": NativeRead
}  # fmt: skip


def _key(f: dataclasses.Field[Any]) -> str:
    return f.name.removesuffix("_")


def _jname(cls: type) -> str:
    """A record's Java class name (nested in Plan)."""
    return str(getattr(cls, "JAVA", cls.__name__))


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, globalns=globals())


def to_json(value: Any) -> Any:
    """A record (or what it holds) as JSON data: the one writer of every plan. Raises TypeError where a field
    holds a value of another type than declared (the jar would refuse the plan)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        _check(value, type(value), type(value).__name__)
    return _json(value)


def _json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if getattr(value, "ARRAY", False):
            return [_json(getattr(value, f.name)) for f in dataclasses.fields(value)]
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v is None and f.metadata.get("omit"):
                continue
            out[_key(f)] = _json(v)
        return out
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value


def _check(value: Any, hint: Any, where: str) -> None:
    hint, nullable = _optional(hint)
    if value is None:
        if not nullable:
            raise TypeError(f"{where} is None")
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if type(value) is not hint:
            raise TypeError(f"{where} is {type(value).__name__}, not {hint.__name__}")
        hints = _hints(hint)
        for f in dataclasses.fields(hint):
            field_hint = hints[f.name]
            if f.metadata.get("omit"):
                field_hint = field_hint | None
            _check(getattr(value, f.name), field_hint, f"{where}.{_key(f)}")
        union = getattr(hint, "UNION", None)
        if union is not None and sum(getattr(value, u) is not None for u in union) != 1:
            raise TypeError(f"{where} has not exactly one of {', '.join(union)}")
    elif origin is tuple:
        if not isinstance(value, tuple):
            raise TypeError(f"{where} is {type(value).__name__}, not a tuple")
        for k, item in enumerate(value):
            _check(item, args[0], f"{where}[{k}]")
    elif origin is dict:
        if not isinstance(value, Mapping):
            raise TypeError(f"{where} is {type(value).__name__}, not a dict")
        for k, item in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where} has the key {k!r}, not a string")
            _check(item, args[1], f"{where}.{k}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where} is {value!r}, not a number")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where} is {value!r}, not an integer")
    elif not isinstance(value, hint):
        raise TypeError(f"{where} is {value!r}, not {hint.__name__}")


def from_json(cls: type[R], data: Any, where: str | None = None) -> R:
    """A record of `cls` read from JSON data (a plan handed back to the planner): the one reader of a written plan
    in Python, as strict as the jar's generated PlanReader. A key the record has not, a key it needs and lacks, a
    value of another type and a plan of another version are each refused (ValueError) in one line that names
    it; `where` names the data (default: the plan, as the jar's reader says it, or the record's name)."""
    if where is None:
        where = _root_where(cls) if cls in ROOTS.values() else cls.__name__
    return typing.cast(R, _read(cls, data, where))


def _refused(where: str, what: str) -> ValueError:
    return ValueError(f"{where} {what}")


def _read(hint: Any, value: Any, where: str) -> Any:
    hint, nullable = _optional(hint)
    if value is None:
        if not nullable:
            raise _refused(where, "is null")
        return None
    if hint is Any:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _read_record(hint, value, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        if not isinstance(value, list):
            raise _refused(where, "is not an array")
        return tuple(_read(args[0], item, f"{where}[{k}]") for k, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _refused(where, "is not an object")
        return {k: _read(args[1], item, f"{where}.{k}") for k, item in value.items()}
    if hint is str and not isinstance(value, str):
        raise _refused(where, "is not a string")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise _refused(where, "is not an integer")
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _refused(where, "is not a number")
        return float(value)
    if hint is bool and not isinstance(value, bool):
        raise _refused(where, "is not true or false")
    return value


def _read_record(cls: type, value: Any, where: str) -> Any:
    hints = _hints(cls)
    fields = dataclasses.fields(cls)
    if getattr(cls, "ARRAY", False):
        if not isinstance(value, list) or len(value) != len(fields):
            raise _refused(where, f"is not an array of {len(fields)}")
        return cls(
            *(_read(hints[f.name], v, f"{where}[{k}]") for k, (f, v) in enumerate(zip(fields, value, strict=True)))
        )
    version = getattr(cls, "VERSION", None)
    if version is not None:  # first: a plan of another version may have other keys
        known = globals()[version]
        written = value.get("version") if isinstance(value, dict) else None
        if written != known or isinstance(written, bool):
            raise _refused(
                where,
                f"is of version {written}, this package reads version {known}: it was written by another release of "
                "dspark-vllm",
            )
    if not isinstance(value, dict):
        raise _refused(where, "is not an object")
    keys = {_key(f): f for f in fields}
    for key in value:
        if key not in keys:
            raise _refused(f"{where}.{key}", "is no key of this plan")
    read = {}
    for key, f in keys.items():
        if key not in value and not f.metadata.get("omit"):
            raise _refused(f"{where}.{key}", "is missing")
        read[f.name] = _read(
            hints[f.name] | None if f.metadata.get("omit") else hints[f.name], value.get(key), f"{where}.{key}"
        )
    record = cls(**read)
    union = getattr(cls, "UNION", None)
    if union is not None and sum(getattr(record, u) is not None for u in union) != 1:
        raise _refused(where, f"has not exactly one of {', '.join(union)}")
    return record


# -- the jar's side --------------------------------------------------------------------------------------------

_JAVA_KEYWORDS = {"default", "native", "class", "new", "int", "long", "double", "boolean"}


def _java_name(key: str) -> str:
    head, *rest = key.split("_")
    name = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return name + "Value" if name in _JAVA_KEYWORDS else name


def _optional(hint: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


_PRIMITIVE = {
    str: ("String", "String"),
    int: ("long", "Long"),
    float: ("double", "Double"),
    bool: ("boolean", "Boolean"),
}


def _java_type(hint: Any, nullable: bool) -> str:
    if hint in _PRIMITIVE:
        return _PRIMITIVE[hint][1 if nullable else 0]
    if hint is Any:
        return "JsonNode"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _jname(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        return f"List<{_java_type(args[0], True)}>"
    if origin is dict:
        return f"Map<String, {_java_type(args[1], True)}>"
    raise TypeError(f"no Java type for {hint!r}")


def _reader(hint: Any, node: str, where: str) -> str:
    """A Java expression reading `node` (a present, non-null JsonNode) as `hint`; `where` names it in a message."""
    if hint is str:
        return f"text({node}, {where})"
    if hint is int:
        return f"integer({node}, {where})"
    if hint is float:
        return f"number({node}, {where})"
    if hint is bool:
        return f"bool({node}, {where})"
    if hint is Any:
        return node
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"read{_jname(hint)}({node}, {where})"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        return f"list({node}, {where}, (v, w) -> {_reader(args[0], 'v', 'w')})"
    if origin is dict:
        return f"map({node}, {where}, (v, w) -> {_reader(args[1], 'v', 'w')})"
    raise TypeError(f"no reader for {hint!r}")


def _plan_java() -> str:
    lines = [
        "package io.dspark.vllm.plan;",
        "",
        "import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;",
        "",
        "import java.io.Serializable;",
        "import java.util.List;",
        "import java.util.Map;",
        "",
        "/**",
        " * GENERATED by {@code python -m connector.plan.records --java}: do not edit. The records of the plans",
        " * the Python planner makes, declared in connector/plan/records.py; read by {@link PlanReader}.",
        " */",
        "public final class Plan {",
        "    private Plan() {}",
        "",
        "    /** The plans' version ({@code connector.plan.records.PLAN_VERSION}). */",
        f"    public static final int PLAN_VERSION = {PLAN_VERSION};",
        "    /** The request spec's ({@code CLIENT_SPEC_VERSION}). */",
        f"    public static final int CLIENT_SPEC_VERSION = {CLIENT_SPEC_VERSION};",
    ]
    for cls in RECORDS:
        hints = _hints(cls)
        doc = (cls.__doc__ or "").strip()
        doc = "" if doc.startswith(cls.__name__ + "(") else " ".join(doc.split())
        lines += ["", f"    /** {doc or cls.__name__} ({cls.__name__} of connector/plan/records.py). */"]
        lines += [f"    public static final class {_jname(cls)} implements Serializable {{"]
        lines += ["        private static final long serialVersionUID = 1L;"]
        params = []
        for f in dataclasses.fields(cls):
            hint, nullable = _optional(hints[f.name])
            jtype = _java_type(hint, nullable or bool(f.metadata.get("omit")))
            name = _java_name(_key(f))
            lines.append(f"        public final {jtype} {name};")
            params.append((jtype, name))
        signature = ", ".join(f"{t} {n}" for t, n in params)
        lines.append(f"        public {_jname(cls)}({signature}) {{")
        for _, name in params:
            lines.append(f"            this.{name} = {name};")
        lines.append("        }")
        lines.append("    }")
    lines += ["}", ""]
    return "\n".join(lines)


def _reader_java() -> str:
    lines = [
        "package io.dspark.vllm.plan;",
        "",
        "import io.dspark.vllm.plan.Plan.*;",
        "import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;",
        "",
        "import java.util.ArrayList;",
        "import java.util.Collections;",
        "import java.util.Iterator;",
        "import java.util.LinkedHashMap;",
        "import java.util.List;",
        "import java.util.Map;",
        "import java.util.Set;",
        "",
        "/**",
        " * GENERATED by {@code python -m connector.plan.records --java}: do not edit. Reads the plans of",
        " * connector/plan/records.py: a key the record has not, a key it needs and lacks, a value of another type",
        " * or a plan of another version is refused in one line that names it.",
        " */",
        "public final class PlanReader {",
        "    private PlanReader() {}",
        "",
        '    private static final String SAME = ": install the same dspark-vllm on the client and the TaskManagers";',
        "",
    ]
    for name, cls in ROOTS.items():
        lines += [
            f"    /** A {name} plan from its JSON. */",
            f"    public static Plan.{name} read{name}(JsonNode node) {{",
            f'        return read{name}(node, "{_root_where(cls)}");',
            "    }",
            "",
        ]
    lines += [
        "    interface Item<T> {",
        "        T read(JsonNode value, String where);",
        "    }",
        "",
        "    private static IllegalArgumentException refused(String where, String what) {",
        '        return new IllegalArgumentException("dspark-vllm: " + where + " " + what + SAME);',
        "    }",
        "",
        "    private static void keys(JsonNode node, String where, Set<String> known) {",
        "        if (node == null || !node.isObject()) {",
        '            throw refused(where, "is not an object");',
        "        }",
        "        Iterator<String> names = node.fieldNames();",
        "        while (names.hasNext()) {",
        "            String key = names.next();",
        "            if (!known.contains(key)) {",
        '                throw refused(where + "." + key, "is no key of this jar\'s plan");',
        "            }",
        "        }",
        "    }",
        "",
        "    /** The value at key, present and not null. */",
        "    private static JsonNode need(JsonNode node, String key, String where) {",
        "        JsonNode value = node.get(key);",
        "        if (value == null) {",
        '            throw refused(where + "." + key, "is missing");',
        "        }",
        "        if (value.isNull()) {",
        '            throw refused(where + "." + key, "is null");',
        "        }",
        "        return value;",
        "    }",
        "",
        "    /** The value at key, which must be present (absent too when it may be omitted); null for JSON null. */",
        "    private static JsonNode maybe(JsonNode node, String key, String where, boolean omitted) {",
        "        JsonNode value = node.get(key);",
        "        if (value == null && !omitted) {",
        '            throw refused(where + "." + key, "is missing");',
        "        }",
        "        return value == null || value.isNull() ? null : value;",
        "    }",
        "",
        "    private static String text(JsonNode v, String where) {",
        "        if (!v.isTextual()) {",
        '            throw refused(where, "is not a string");',
        "        }",
        "        return v.asText();",
        "    }",
        "",
        "    private static long integer(JsonNode v, String where) {",
        "        if (!v.isIntegralNumber() || !v.canConvertToLong()) {",
        '            throw refused(where, "is not an integer");',
        "        }",
        "        return v.asLong();",
        "    }",
        "",
        "    private static double number(JsonNode v, String where) {",
        "        if (!v.isNumber()) {",
        '            throw refused(where, "is not a number");',
        "        }",
        "        return v.asDouble();",
        "    }",
        "",
        "    private static boolean bool(JsonNode v, String where) {",
        "        if (!v.isBoolean()) {",
        '            throw refused(where, "is not true or false");',
        "        }",
        "        return v.asBoolean();",
        "    }",
        "",
        "    private static <T> List<T> list(JsonNode v, String where, Item<T> item) {",
        "        if (!v.isArray()) {",
        '            throw refused(where, "is not an array");',
        "        }",
        "        List<T> out = new ArrayList<>(v.size());",
        "        for (int k = 0; k < v.size(); k++) {",
        '            out.add(v.get(k).isNull() ? null : item.read(v.get(k), where + "[" + k + "]"));',
        "        }",
        "        return Collections.unmodifiableList(out);",
        "    }",
        "",
        "    private static <T> Map<String, T> map(JsonNode v, String where, Item<T> item) {",
        "        if (!v.isObject()) {",
        '            throw refused(where, "is not an object");',
        "        }",
        "        Map<String, T> out = new LinkedHashMap<>();",
        "        v.fields().forEachRemaining(",
        '                e -> out.put(e.getKey(), item.read(e.getValue(), where + "." + e.getKey())));',
        "        return Collections.unmodifiableMap(out);",
        "    }",
        "",
        "    private static void version(JsonNode node, String where, int known) {",
        '        JsonNode made = node == null ? null : node.get("version");',
        "        if (made == null || !made.isInt() || made.asInt() != known) {",
        '            throw new IllegalArgumentException("dspark-vllm: " + where + " is of version " + made',
        '                    + ", this jar reads version " + known + ": the Python package and the jar on the "',
        '                    + "classpath are of different releases; install the same dspark-vllm on the client and "',
        '                    + "the TaskManagers "',
        "                    + \"and use the jar of the installed package ('dspark-vllm sql --jar')\");",
        "        }",
        "    }",
    ]
    for cls in RECORDS:
        lines += ["", *_read_method(cls)]
    lines += ["}", ""]
    return "\n".join(lines)


def _root_where(cls: type) -> str:
    return {TablePlan: "the table's plan", ModelPlan: "the model's plan", FormatPlan: "the format's plan",
            ClientSpec: "the plan's request spec", NativeRead: "the native core's read"}[cls]  # fmt: skip


def _read_method(cls: type) -> list[str]:
    hints = _hints(cls)
    fields = dataclasses.fields(cls)
    name = _jname(cls)
    lines = [f"    static Plan.{name} read{name}(JsonNode node, String where) {{"]
    args = []
    if getattr(cls, "ARRAY", False):
        lines += [
            f"        if (!node.isArray() || node.size() != {len(fields)}) {{",
            f'            throw refused(where, "is not an array of {len(fields)}");',
            "        }",
        ]
        for k, f in enumerate(fields):
            hint, nullable = _optional(hints[f.name])
            var = _java_name(_key(f))
            expr = _reader(hint, f"node.get({k})", f'where + "[{k}]"')
            if nullable:
                expr = f"node.get({k}).isNull() ? null : {expr}"
            lines.append(f"        {_java_type(hint, nullable)} {var} = {expr};")
            args.append(var)
    else:
        known = ", ".join(json.dumps(_key(f)) for f in fields)
        version = getattr(cls, "VERSION", None)
        if version is not None:  # first: a plan of another version may have other keys
            lines.append(f"        version(node, where, Plan.{version});")
        lines.append(f"        keys(node, where, Set.of({known}));")
        for f in fields:
            key = _key(f)
            hint, nullable = _optional(hints[f.name])
            omitted = bool(f.metadata.get("omit"))
            var = _java_name(key)
            at = f'where + ".{key}"'
            if nullable or omitted:
                jtype = _java_type(hint, True)
                lines.append(f'        JsonNode {var}Node = maybe(node, "{key}", where, {str(omitted).lower()});')
                lines.append(f"        {jtype} {var} = {var}Node == null ? null : {_reader(hint, var + 'Node', at)};")
            else:
                jtype = _java_type(hint, False)
                lines.append(f"        {jtype} {var} = {_reader(hint, f'need(node, {json.dumps(key)}, where)', at)};")
            args.append(var)
        union = getattr(cls, "UNION", None)
        if union is not None:
            present = " + ".join(f"({_java_name(u)} == null ? 0 : 1)" for u in union)
            lines += [
                f"        if ({present} != 1) {{",
                f'            throw refused(where, "has not exactly one of {", ".join(union)}");',
                "        }",
            ]
    lines.append(f"        return new Plan.{name}({', '.join(args)});")
    lines.append("    }")
    return lines


def java_sources() -> dict[str, str]:
    """The generated Java files, by name (in java/src/main/java/io/dspark/vllm/plan)."""
    return {"Plan.java": _plan_java(), "PlanReader.java": _reader_java()}


def _main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("--java", "--check"):
        print("usage: python -m connector.plan.records --java DIR | --check DIR", file=sys.stderr)
        return 2
    folder = Path(argv[1])
    stale = []
    for name, text in java_sources().items():
        path = folder / name
        if argv[0] == "--java":
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(str(path))
    if stale:
        print(f"{', '.join(stale)} stale: run python -m connector.plan.records --java {folder}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
