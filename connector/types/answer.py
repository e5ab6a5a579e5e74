"""Answer fields: the columns a query declares beyond its profile and metadata, as the JSON object the model writes.

A model's OUTPUT column (or a 'dspark-vllm' table's physical column) that is neither a profile column nor a
metadata key is a field of the answer: its Flink type gives its JSON Schema (`field_schema`), the fields together
the answer's schema (`answer_schema`), which the request carries as `response_format` (or vLLM's
`structured_outputs`, or an instruction in the prompt) and which the parse step holds every answer to. The
fields are a profile's content properties (`answer_profile`): the native core types them as it types any
content, and the JVM's answer check (`io.dspark.vllm.engine.Answers`) holds each typed value to its declared type
and to the schema's constraints, making a row that does not keep them an error row that names the field.

Types (docs/flink.md, "Typed answers"):

    BOOLEAN                      {"type": "boolean"}
    TINYINT .. BIGINT            {"type": "integer", "minimum": <type's least>, "maximum": <type's most>}
    FLOAT, DOUBLE                {"type": "number"}
    DECIMAL(p, s), p <= 15       {"type": "number", "minimum": -(10^(p-s) - 10^-s), "maximum": 10^(p-s) - 10^-s}
    CHAR(n), VARCHAR(n), STRING  {"type": "string", "pattern": "^[^\\u0000-\\u001f]{0,n}$"}  (or an "enum")
    DATE, TIME(p), TIMESTAMP(p)  {"type": "string", "pattern": <ISO 8601's form>}; TIMESTAMP_LTZ(p): ...Z
    ARRAY<T>                     {"type": "array", "items": <T>} (+ "minItems", "maxItems")
    MAP<STRING, T>               {"type": "object", "additionalProperties": <T>}
    ROW<f T, ...>                {"type": "object", "properties": {...}, "required": [...],
                                  "additionalProperties": false}

A string's length is bounded by a `pattern` that also keeps control characters out: vLLM's grammar backend
(xgrammar) lets raw control characters into strings, which is not JSON, and refuses `pattern` beside
`maxLength`. Pure code: no pyflink, no JVM.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from connector.errors import OptionsError

__all__ = [
    "ANSWER_TYPES",
    "AnswerField",
    "answer_options",
    "answer_profile_data",
    "answer_schema",
    "field_schema",
    "instruction",
]

# The integer types' ranges, by Flink type root.
_INTEGERS = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}
_MAX_LENGTH = 2147483647  # STRING is VARCHAR(2147483647): no bound
# The digits a double holds exactly: the native core reads an answer's numbers as JSON's readers do (a float is a
# double), so a DECIMAL with more would be typed with other digits than the model wrote.
_DOUBLE_DIGITS = 15
_DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
# What a user may declare, for the one line that refuses another type.
ANSWER_TYPES = (
    "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p <= 15, s), CHAR(n), VARCHAR(n), STRING, DATE, "
    "TIME(p), TIMESTAMP(p), TIMESTAMP_LTZ(p), ARRAY<T>, MAP<STRING, T>, ROW<...>"
)
# Per-field settings, as 'answer.<field>.<setting>' (a nested ROW field: 'answer.<field>.<inner>.<setting>').
_SETTINGS = ("enum", "min-items", "max-items")
ANSWER_NULLABLE = "answer.nullable"
ANSWER_PREFIX = "answer."


def _shown(ftype: Mapping[str, Any]) -> str:
    """A type as a user declares it (Flink writes STRING as VARCHAR(2147483647))."""
    return str(ftype.get("sql")).replace("VARCHAR(2147483647)", "STRING").replace("VARBINARY(2147483647)", "BYTES")


def _fraction(precision: int) -> str:
    return rf"(\.[0-9]{{1,{precision}}})?" if precision > 0 else ""


def _decimal_bound(precision: int, scale: int) -> int | float:
    bound = Decimal(10) ** (precision - scale) - Decimal(10) ** (-scale)
    return int(bound) if scale == 0 else float(bound)


# The characters a string may hold ('answer.string-characters'): 'all' but the control characters, or 'safe':
# those whose UTF-8 forms vLLM's xgrammar backend constrains exactly. It writes overlong forms for a class that
# holds U+0800-U+0FFF (lead byte E0) or characters beyond the BMP, which the server's decoder turns into U+FFFD.
CHARACTERS = {
    "all": "^\\u0000-\\u001f",
    "safe": "\\u0020-\\u007e\\u00a0-\\u07ff\\u1000-\\ud7ff\\ue000-\\ufffd",
}


def _string_pattern(length: int, characters: str = "all") -> str:
    most = "*" if length >= _MAX_LENGTH else f"{{0,{length}}}"
    return f"^[{CHARACTERS[characters]}]{most}$"


@dataclass(frozen=True)
class AnswerField:
    """One declared column that the answer fills: its name, its Flink type (as the factory describes it) and its
    COMMENT."""

    name: str
    type: Mapping[str, Any]
    comment: str | None = None


def field_schema(
    ftype: Mapping[str, Any],
    where: str,
    settings: Mapping[str, Mapping[str, str]] | None = None,
    nullable: frozenset[str] = frozenset(),
    description: str | None = None,
    characters: str = "all",
) -> dict[str, Any]:
    """The JSON Schema of a value of Flink type `ftype` (`{"sql", "root", "length", "precision", "scale",
    "element", "key", "value", "fields"}`, as io.dspark.vllm.sql.PythonPlanner describes a type) at `where` (the
    field's dotted path). `settings`: per path, the 'answer.<path>.<setting>' options; `nullable`: the paths the
    model may answer null. Raises OptionsError for a type with no JSON form."""
    settings = settings or {}
    root = str(ftype.get("root"))
    mine = dict(settings.get(where, {}))
    schema: dict[str, Any]
    if root == "BOOLEAN":
        schema = {"type": "boolean"}
    elif root in _INTEGERS:
        low, high = _INTEGERS[root]
        schema = {"type": "integer", "minimum": low, "maximum": high}
    elif root in ("FLOAT", "DOUBLE"):
        schema = {"type": "number"}
    elif root == "DECIMAL":
        precision, scale = int(ftype["precision"]), int(ftype["scale"])
        if precision > _DOUBLE_DIGITS:
            raise OptionsError(
                f"Column '{where}' is {_shown(ftype)}, more digits than the answer's numbers carry: they are read as "
                f"doubles, which hold {_DOUBLE_DIGITS} digits exactly; declare DECIMAL(p, s) with p <= "
                f"{_DOUBLE_DIGITS}, BIGINT for a whole number, or DOUBLE."
            )
        bound = _decimal_bound(precision, scale)
        schema = {"type": "number", "minimum": -bound, "maximum": bound}
    elif root in ("CHAR", "VARCHAR"):
        values = mine.pop("enum", None)
        if values is not None:
            items = [v for v in values.split(";") if v]
            if not items:
                raise OptionsError(f"Option 'answer.{where}.enum' names no value: list them separated by ';'.")
            too_long = [v for v in items if len(v) > int(ftype["length"])]
            if too_long:
                raise OptionsError(
                    f"Option 'answer.{where}.enum' has '{too_long[0]}', longer than {_shown(ftype)} holds: declare "
                    "the column longer or shorten the value."
                )
            schema = {"type": "string", "enum": items}
        else:
            schema = {"type": "string", "pattern": _string_pattern(int(ftype["length"]), characters)}
    elif root == "DATE":
        schema = {"type": "string", "pattern": f"^{_DATE}$"}
    elif root == "TIME_WITHOUT_TIME_ZONE":
        schema = {"type": "string", "pattern": f"^{_TIME}{_fraction(int(ftype['precision']))}$"}
    elif root in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
        zone = "Z" if root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE" else ""
        schema = {"type": "string", "pattern": f"^{_DATE}T{_TIME}{_fraction(int(ftype['precision']))}{zone}$"}
    elif root == "ARRAY":
        schema = {
            "type": "array",
            "items": field_schema(ftype["element"], f"{where}[]", settings, nullable, None, characters),
        }
        for setting, key in (("min-items", "minItems"), ("max-items", "maxItems")):
            raw = mine.pop(setting, None)
            if raw is not None:
                if not re.fullmatch(r"[0-9]{1,9}", raw.strip()):
                    raise OptionsError(f"Option 'answer.{where}.{setting}' must be a whole number, got '{raw}'.")
                schema[key] = int(raw)
        if schema.get("minItems", 0) > schema.get("maxItems", _MAX_LENGTH):
            raise OptionsError(f"Option 'answer.{where}.min-items' is more than 'answer.{where}.max-items'.")
    elif root == "MAP":
        key = ftype["key"]
        if key.get("root") not in ("CHAR", "VARCHAR"):
            raise OptionsError(
                f"Column '{where}' is {_shown(ftype)}: a JSON object's keys are strings, declare MAP<STRING, ...>."
            )
        value = field_schema(ftype["value"], f"{where}{{}}", settings, nullable, None, characters)
        schema = {"type": "object", "additionalProperties": value}
    elif root == "ROW":
        properties = {}
        for f in ftype.get("fields", []):
            properties[str(f["name"])] = field_schema(
                f["type"], f"{where}.{f['name']}", settings, nullable, f.get("description"), characters
            )
        schema = {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }
    else:
        raise OptionsError(
            f"Column '{where}' is {_shown(ftype)}, which has no JSON form for the model to write: declare one of "
            f"{ANSWER_TYPES}."
        )
    if mine:
        bad = sorted(mine)[0]
        fits = {"enum": "a CHAR, VARCHAR or STRING column", "min-items": "an ARRAY", "max-items": "an ARRAY"}
        raise OptionsError(f"Option 'answer.{where}.{bad}' needs {fits[bad]}; '{where}' is {_shown(ftype)}.")
    if description:
        schema["description"] = description
    if where in nullable:
        return {"anyOf": [schema, {"type": "null"}]}
    return schema


def answer_options(
    options: Mapping[str, str], fields: Sequence[AnswerField]
) -> tuple[dict[str, dict[str, str]], frozenset[str]]:
    """The 'answer.*' options of a model or table: (settings by field path, the paths the model may leave null).
    A key that names no field, or no setting, is refused in one line."""
    paths = set()

    def walk(prefix: str, ftype: Mapping[str, Any]) -> None:
        paths.add(prefix)
        for f in ftype.get("fields", []) if ftype.get("root") == "ROW" else ():
            walk(f"{prefix}.{f['name']}", f["type"])

    for f in fields:
        walk(f.name, f.type)
    names = ", ".join(f.name for f in fields) or "(none)"
    settings: dict[str, dict[str, str]] = {}
    nullable: set[str] = set()
    for key, value in options.items():
        if key == ANSWER_NULLABLE:
            for path in (p.strip() for p in value.split(";") if p.strip()):
                if path not in paths:
                    raise OptionsError(
                        f"Option '{ANSWER_NULLABLE}' names '{path}', which is no answer field; answer fields: {names}."
                    )
                nullable.add(path)
            continue
        if not key.startswith(ANSWER_PREFIX) or key.count(".") < 2:
            continue  # not an answer option, or one the options table declares ('answer.constraint')
        rest = key[len(ANSWER_PREFIX) :]
        path, _, setting = rest.rpartition(".")
        if setting not in _SETTINGS or not path:
            raise OptionsError(
                f"Option '{key}' is not an answer setting: write 'answer.<field>.<setting>', a setting one of "
                f"{', '.join(_SETTINGS)}, or '{ANSWER_NULLABLE}'."
            )
        if path not in paths:
            raise OptionsError(f"Option '{key}' names '{path}', which is no answer field; answer fields: {names}.")
        settings.setdefault(path, {})[setting] = value
    return settings, frozenset(nullable)


def answer_schema(fields: Sequence[AnswerField], options: Mapping[str, str], characters: str = "all") -> dict[str, Any]:
    """The JSON Schema of the whole answer: one object, a property per field, every field required (the paths of
    'answer.nullable' may be null), no other property; strings of `characters` ('answer.string-characters')."""
    settings, nullable = answer_options(options, fields)
    properties = {f.name: field_schema(f.type, f.name, settings, nullable, f.comment, characters) for f in fields}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def answer_profile_data(name: str, base: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A profile file's data that extends profile `base` with the answer's schema as its content schema."""
    return {
        "name": name,
        "extends": base,
        "description": "the answer fields the query declares",
        "content": copy.deepcopy(dict(schema)),
    }


def instruction(schema: Mapping[str, Any]) -> str:
    """What the prompt says when the server is not asked to keep to the schema ('answer.constraint' = 'prompt')."""
    import json

    return "Answer with one JSON object and nothing else, matching this JSON Schema: " + json.dumps(
        schema, ensure_ascii=False, separators=(",", ":")
    )
