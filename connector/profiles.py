"""Model profiles: `schemas/*.yaml` (or a user's own file) -> `Profile`.

A profile says what a model's responses look like: the body's JSON Schema and flat columns (inherited from
`openai`, the base vLLM shape), extra top-level body `fields`, the unit of `created`, and `content`: the JSON
Schema of what the model writes inside `choices[0].message.content`. Content properties may carry an
`x-extract` regex, used when the model wrote free text instead of JSON.

    >>> from connector.profiles import load_profile
    >>> load_profile("coder").content_properties[0].name
    'language'
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import jsonschema
import pyarrow as pa
import re2
import referencing
import referencing.exceptions
import yaml
from referencing.jsonschema import DRAFT202012

from connector.errors import ProfileError
from connector.types.json_types import PRIMITIVE_TYPES, declared_types

__all__ = [
    "BUILTIN_DIR",
    "ContentProperty",
    "Extractor",
    "Profile",
    "builtin_profiles",
    "load_profile",
    "profile_for_model",
]

# A link to the top-level schemas/ in a checkout; real files in an installed wheel.
BUILTIN_DIR = Path(__file__).resolve().parent / "_schemas"
CreatedUnit = Literal["seconds", "millis", "iso"]
ContentKind = Literal["string", "integer", "number", "boolean", "array", "json"]
PRIMITIVES = PRIMITIVE_TYPES

_EXTRACT = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string"},
        "all": {"type": "boolean"},
        "last": {"type": "boolean"},
        "count": {"type": "boolean"},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}
_JSON_TYPE = {"enum": ["string", "integer", "number", "boolean", "array", "object", "null"]}
_PROPERTY = {
    "type": "object",
    "properties": {
        "type": {"anyOf": [_JSON_TYPE, {"type": "array", "items": _JSON_TYPE, "minItems": 1}]},
        "x-extract": _EXTRACT,
    },
    # A content property may also say its type through $ref or anyOf (as pydantic writes it): see _resolved.
    "anyOf": [{"required": ["type"]}, {"required": ["$ref"]}, {"required": ["anyOf"]}, {"required": ["oneOf"]}],
}
_FIELD = {**_PROPERTY, "anyOf": [{"required": ["type"]}]}
_PATH = {"type": "string", "pattern": r"^[^.]+(\.[^.]+)*$"}
_COLUMN = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
        "path": {"anyOf": [_PATH, {"type": "array", "items": _PATH, "minItems": 1}]},
        "reduce": {"enum": ["length"]},
    },
    "required": ["name", "path"],
    "additionalProperties": False,
}
# What a profile file may hold. Validated with jsonschema so that errors name the exact key.
PROFILE_FILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z][A-Za-z0-9_.-]*$"},
        "extends": {"type": "string"},
        "description": {"type": "string"},
        "models": {"type": "array", "items": {"type": "string"}},
        "created": {"enum": ["seconds", "millis", "iso"]},
        "fields": {"type": "object", "additionalProperties": _FIELD},
        "content": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {
                        "type": {"const": "object"},
                        "properties": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": _PROPERTY,
                        },
                    },
                    "required": ["properties"],
                },
            ]
        },
        "body": {"type": "object"},
        "columns": {"type": "array", "items": _COLUMN, "minItems": 1},
    },
    "required": ["name"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Extractor:
    """How to take a content property out of free text: an RE2 pattern, its first/last/all matches or their
    count (see `tests/oracle/extract.py`, the reference; the native core runs them).

    `source`: the pattern as given, `.` matching newlines; `pattern`: it compiled by RE2. `arrow_pattern`:
    the same with every capturing group named, as pyarrow's `extract_regex` needs, and `arrow_group` the name
    of the group that holds the value (None when the pattern could not be given to pyarrow).
    """

    source: str
    pattern: Any  # re2._Regexp (google-re2 has no type stubs)
    mode: Literal["first", "last", "all", "count"]
    arrow_pattern: str | None = None
    arrow_group: str | None = None


def _capturing_parens(pattern: str) -> list[int]:
    """Positions of the `(` that open unnamed capturing groups in an RE2 pattern."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        if pattern.startswith("\\Q", i):  # a literal span, up to \E or the end
            end = pattern.find("\\E", i + 2)
            i = len(pattern) if end < 0 else end + 2
        elif pattern[i] == "\\":
            i += 2
        elif in_class:
            if pattern.startswith("[:", i) and pattern.find(":]", i + 2) > 0:
                i = pattern.find(":]", i + 2) + 2
            else:
                in_class = pattern[i] != "]"
                i += 1
        elif pattern[i] == "[":
            in_class = True
            i += 1
            i += pattern.startswith("^", i)
            i += pattern.startswith("]", i)  # a `]` first in a class is literal
        else:
            if pattern[i] == "(" and not pattern.startswith("(?", i):
                out.append(i)
            i += 1
    return out


def _for_arrow(source: str, compiled: Any) -> tuple[str | None, str | None]:
    """`source` with all groups named (pyarrow's extract_regex refuses unnamed ones) and the value group's
    name; (None, None) when the rewrite does not give RE2 the same groups (then the RE2 binding is used)."""
    if not compiled.groups:
        return f"(?P<value>{source})", "value"
    rewritten = source
    for number, at in reversed(list(enumerate(_capturing_parens(source), start=1))):
        rewritten = f"{rewritten[:at]}(?P<_group{number}>{rewritten[at + 1 :]}"
    try:
        check = re2.compile(rewritten, _RE2_OPTIONS)
    except re2.error:
        return None, None
    names = {index: name for name, index in check.groupindex.items()}
    if check.groups != compiled.groups or len(names) != check.groups:
        return None, None
    try:
        _arrow_compiles("extract_regex", rewritten)
    except pa.ArrowInvalid:
        return None, None
    return rewritten, names[1]


def _arrow_compiles(function: str, pattern: str) -> None:
    """Raises pa.ArrowInvalid where pyarrow's compute `function` (its RE2) refuses `pattern`.

    Given one null: on an empty array pyarrow compiles no pattern. Called through pyarrow's compute
    extension, not `pyarrow.compute`, whose import wraps every function (25 ms of `dspark-vllm parse`'s start).
    """
    from pyarrow._compute import ExtractRegexOptions, MatchSubstringOptions, call_function

    options = ExtractRegexOptions(pattern) if function == "extract_regex" else MatchSubstringOptions(pattern)
    call_function(function, [_ONE_NULL], options)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is a ProfileError, not a line on stderr
# What pyarrow's RE2 compiles patterns against: made without pa.array, which imports pandas (a tenth of a
# second of the command line's start) to ask whether a list is a pandas object.
_ONE_NULL = pa.nulls(1, pa.string())


@dataclass(frozen=True)
class ContentProperty:
    """One top-level property of the content schema, and so one output column."""

    name: str
    kind: ContentKind
    item_kind: str | None  # for kind == "array": the primitive type of the items
    schema: Mapping[str, Any]
    extract: Extractor | None


@dataclass(frozen=True)
class Profile:
    """A resolved profile: the base shape merged with everything its `extends` chain adds."""

    name: str
    description: str
    source: str
    models: tuple[str, ...]
    created_unit: CreatedUnit
    body_schema: Mapping[str, Any]
    columns: tuple[Mapping[str, Any], ...]
    content_schema: Mapping[str, Any] | None
    content_properties: tuple[ContentProperty, ...]
    # The files it was built from, base first, as (path, what the file holds): `document()` and
    # `profile_of_document` carry a profile to a place where its files are not (a Flink worker) as JSON.
    files: tuple[tuple[str, Mapping[str, Any]], ...] = field(default=(), repr=False, compare=False)

    def document(self) -> list[dict[str, Any]]:
        """The profile as JSON: the files it was built from, base first (`profile_of_document` rebuilds it)."""
        return [{"path": path, "data": data} for path, data in self.files]

    @property
    def has_text_extractors(self) -> bool:
        return any(p.extract is not None for p in self.content_properties)

    def matches_model(self, model: str) -> bool:
        return any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)

    def response_json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the response body, the profile's content schema attached as a hint.

        This is what `/health/json-schema` serves (the simulator does; a gateway can).
        """
        schema = copy.deepcopy(dict(self.body_schema))
        schema["x-profile"] = self.name
        schema["x-created-unit"] = self.created_unit
        if self.content_schema is not None:
            schema["x-content-schema"] = copy.deepcopy(dict(self.content_schema))
        return schema

    def response_format(self) -> dict[str, Any] | None:
        """The `response_format` that makes vLLM write content matching this profile (structured output)."""
        if self.content_schema is None:
            return None
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "schema": _strip_extensions(self.content_schema)},
        }


def _strip_extensions(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip_extensions(v) for k, v in value.items() if not str(k).startswith("x-")}
    if isinstance(value, list):
        return [_strip_extensions(v) for v in value]
    return value


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped in `schemas/`."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a built-in profile by name (`coder`) or a profile file by path (`./risk.yaml`)."""
    return _load(str(name_or_path), ())


def profile_for_model(model: str, default: str = "openai") -> Profile:
    """The first built-in profile (other than the base) whose `models` patterns match `model`."""
    for name in builtin_profiles():
        if name != "openai":
            profile = load_profile(name)
            if profile.matches_model(model):
                return profile
    return load_profile(default)


def _resolve_path(name_or_path: str, relative_to: str | None) -> Path:
    looks_like_path = name_or_path.endswith((".yaml", ".yml", ".json")) or "/" in name_or_path
    if not looks_like_path:
        builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
        if builtin.exists():
            return builtin
        raise ProfileError(
            f"unknown profile {name_or_path!r}: use one of {', '.join(builtin_profiles())} or the path of a "
            "profile file (.yaml)"
        )
    path = Path(name_or_path)
    if not path.is_absolute() and relative_to is not None:
        candidate = Path(relative_to).parent / path
        path = candidate if candidate.exists() else path
    if not path.exists():
        raise ProfileError(f"{name_or_path}: profile file not found")
    return path


@lru_cache(maxsize=64)
def _read_file(path: str, mtime: float) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read the profile file: {exc}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProfileError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping with at least 'name', got {type(data).__name__}")
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(PROFILE_FILE_SCHEMA).iter_errors(data))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ProfileError(f"{path}: key '{key}': {error.message}")
    return data


def _load(name_or_path: str, seen: tuple[str, ...], relative_to: str | None = None) -> Profile:
    path = _resolve_path(name_or_path, relative_to)
    key = str(path.resolve())
    if key in seen:
        raise ProfileError(f"{path}: key 'extends': circular ({' -> '.join([*seen, key])})")
    data = _read_file(key, path.stat().st_mtime)
    parent = None
    if "extends" in data:
        parent = _load(data["extends"], (*seen, key), relative_to=key)
    elif "body" not in data:
        parent = _load("openai", (*seen, key))
    # Built once per file version and parent: building checks schemas and compiles patterns, and a batch
    # names its profile on every call. `data` is the cached read of this very version of the file.
    cache_key = (str(path), id(data), id(parent))
    cached = _built.get(cache_key)
    if cached is None:
        if len(_built) > 64:
            _built.clear()
        # The parent and data are kept with the profile so that their ids stay theirs.
        cached = _built[cache_key] = (_build(path, data, parent), parent, data)
    return cached[0]


_built: dict[tuple[str, int, int], tuple[Profile, Profile | None, dict[str, Any]]] = {}


def _build(path: Path, data: dict[str, Any], parent: Profile | None) -> Profile:
    if parent is None:
        if "columns" not in data or "body" not in data:
            raise ProfileError(f"{path}: key 'columns': a profile without 'extends' must define body and columns")
        try:
            jsonschema.Draft202012Validator.check_schema(data["body"])
        except jsonschema.SchemaError as exc:
            key = ".".join(["body", *map(str, exc.absolute_path)])
            raise ProfileError(f"{path}: key '{key}': not a valid JSON Schema: {exc.message}") from None
        body_schema: dict[str, Any] = copy.deepcopy(data["body"])
        columns = [dict(c) for c in data["columns"]]
        seen: set[str] = set()
        for i, column in enumerate(columns):
            if column["name"] in seen:
                raise ProfileError(f"{path}: key 'columns.{i}.name': '{column['name']}' is already a column")
            seen.add(column["name"])
    else:
        if "body" in data or "columns" in data:
            raise ProfileError(f"{path}: keys 'body' and 'columns' belong to a base profile; add 'fields' instead")
        body_schema = copy.deepcopy(dict(parent.body_schema))
        columns = [dict(c) for c in parent.columns]
    names = {c["name"] for c in columns}
    for key, schema in (data.get("fields") or {}).items():
        if key in body_schema.get("properties", {}) and key not in names:
            raise ProfileError(f"{path}: key 'fields.{key}': already a field of the base body; choose another")
        if key in names:
            raise ProfileError(f"{path}: key 'fields.{key}': clashes with the column '{key}'")
        _check_kind(path, f"fields.{key}", schema, allow_nested=False)
        body_schema.setdefault("properties", {})[key] = copy.deepcopy(schema)
        columns.append({"name": key, "path": key})
        names.add(key)

    content_schema = data.get("content", parent.content_schema if parent is not None else None)
    properties: list[ContentProperty] = []
    if content_schema is not None:
        try:
            jsonschema.Draft202012Validator.check_schema(content_schema)
        except jsonschema.SchemaError as exc:
            raise ProfileError(f"{path}: key 'content': not a valid JSON Schema: {exc.message}") from exc
        for prop, schema in content_schema["properties"].items():
            where = f"content.properties.{prop}"
            if prop in names or prop in ("content_error", "line"):
                raise ProfileError(f"{path}: key '{where}': clashes with the column '{prop}'; rename it")
            properties.append(_content_property(path, where, prop, _resolved(path, where, schema, content_schema)))
    return Profile(
        name=data["name"],
        description=data.get("description", parent.description if parent else ""),
        source=str(path),
        models=tuple(data.get("models", parent.models if parent else ("*",))),
        created_unit=data.get("created", parent.created_unit if parent else "seconds"),
        body_schema=body_schema,
        columns=tuple(columns),
        content_schema=content_schema,
        content_properties=tuple(properties),
        files=(*(parent.files if parent is not None else ()), (str(path), data)),
    )


def profile_of_document(document: Sequence[Mapping[str, Any]]) -> Profile:
    """The profile `Profile.document()` wrote, built again from its files' contents (no file is read)."""
    profile: Profile | None = None
    for part in document:
        profile = _build(Path(str(part["path"])), dict(part["data"]), profile)
    if profile is None:
        raise ProfileError("an empty profile document")
    return profile


def _resolved(path: Path, where: str, schema: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    """A content property's schema with `$ref`s followed (within the content schema, e.g. to `$defs`) and
    `anyOf`/`oneOf` alternatives of type null dropped, as pydantic's `model_json_schema()` writes them.

    Resolved as deep as the property's own type and its `items` need: nested objects become JSON text.
    """
    resource = referencing.Resource.from_contents(dict(root), default_specification=DRAFT202012)
    resolver = referencing.Registry().with_resource("urn:content", resource).resolver("urn:content")

    def resolve(node: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
        out = dict(node)
        ref = out.pop("$ref", None)
        if ref is not None:
            if ref in seen or len(seen) > 32:
                return {**out, "type": "object"}  # a recursive type: kept as JSON text
            try:
                target = resolver.lookup(ref).contents
            except referencing.exceptions.Unresolvable:
                raise ProfileError(f"{path}: key '{where}.$ref': {ref!r} does not resolve in 'content'") from None
            out = {**resolve(target, (*seen, ref)), **out}
        for key in ("anyOf", "oneOf"):
            if key in out:
                options = [o for o in out[key] if not (isinstance(o, Mapping) and o.get("type") == "null")]
                if len(options) == 1 and isinstance(options[0], Mapping):
                    del out[key]
                    out = {**resolve(options[0], seen), **out}
        if isinstance(out.get("items"), Mapping):
            out["items"] = resolve(out["items"], seen)
        return out

    return resolve(schema, ())


def _check_kind(path: Path, where: str, schema: Mapping[str, Any], *, allow_nested: bool) -> str:
    types = declared_types(schema)
    if len(types) != 1:
        raise ProfileError(f"{path}: key '{where}.type': expected one type besides null, got {schema.get('type')}")
    kind = types[0]
    if not allow_nested and kind not in PRIMITIVES:
        raise ProfileError(f"{path}: key '{where}.type': expected one of {', '.join(PRIMITIVES)}, got {kind}")
    return kind


def _content_property(path: Path, where: str, name: str, schema: Mapping[str, Any]) -> ContentProperty:
    kind = _check_kind(path, where, schema, allow_nested=True)
    item_kind = None
    if kind == "array":
        items = schema.get("items")
        item_types = declared_types(items) if isinstance(items, Mapping) else []
        if len(item_types) == 1 and item_types[0] in PRIMITIVES:
            item_kind = item_types[0]
        else:
            kind = "json"  # arrays of arrays or objects: kept as JSON text
    elif kind == "object":
        kind = "json"
    extract = None
    if "x-extract" in schema:
        spec = schema["x-extract"]
        source = "(?s)" + spec["pattern"]
        try:
            pattern = re2.compile(source, _RE2_OPTIONS)
            _arrow_compiles("match_substring_regex", source)  # pyarrow's RE2 takes it too
        except (re2.error, pa.ArrowInvalid) as exc:
            detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            detail = detail.replace(source, spec["pattern"])
            raise ProfileError(
                f"{path}: key '{where}.x-extract.pattern': {spec['pattern']!r} is not an RE2 pattern ({detail}); "
                "patterns are RE2 (https://github.com/google/re2/wiki/Syntax): no look-around, no backreferences"
            ) from None
        modes = [m for m in ("all", "last", "count") if spec.get(m)]
        if len(modes) > 1:
            raise ProfileError(f"{path}: key '{where}.x-extract': set only one of all, last, count")
        mode = modes[0] if modes else "first"
        if mode == "count" and kind != "integer":
            raise ProfileError(f"{path}: key '{where}.x-extract.count': needs type integer, got {kind}")
        if mode == "all" and kind not in ("array", "json"):
            raise ProfileError(f"{path}: key '{where}.x-extract.all': needs type array, got {kind}")
        if mode != "all" and kind in ("array",):
            raise ProfileError(f"{path}: key '{where}.x-extract': an array property needs 'all: true'")
        arrow_pattern, arrow_group = _for_arrow(source, pattern) if mode == "first" else (None, None)
        extract = Extractor(source, pattern, mode, arrow_pattern, arrow_group)  # type: ignore[arg-type]
    return ContentProperty(name=name, kind=kind, item_kind=item_kind, schema=schema, extract=extract)  # type: ignore[arg-type]
