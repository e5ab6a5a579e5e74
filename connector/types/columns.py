"""A profile's flat output columns: their paths into the body, their Arrow types, and the reader's schema.

Paths (see `schemas/openai.yaml`): a dotted walk where a name is an object key, `0` the first array element
and `*` every element (the column is then a list). Several paths for one column are a coalesce: the first
non-null wins (for `*` paths the coalesce is per element).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connector.errors import ProfileError
from connector.profiles import ContentProperty, Profile
from connector.types.json_types import declared_types

__all__ = [
    "Column",
    "body_columns",
    "content_arrow_type",
    "content_read_schema",
    "INT_OR_STRING",
    "is_int_or_string",
    "output_schema",
    "read_schema",
]

Path = tuple[str, ...]
# JSON Schema type -> (Arrow type, check name used by the exact decoder)
ARROW_OF: dict[str, pa.DataType] = {
    "string": pa.string(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
}
TIMESTAMP = pa.timestamp("ms", tz="UTC")
# The timestamps Flink's TIMESTAMP(3) can hold: years 1..9999, in milliseconds since the epoch.
MS_MIN, MS_MAX = -62135596800000, 253402300799999
# Marks a read-schema leaf that may hold an integer or a string (`stop_reason`): the GPU reader checks such
# leaves by this mark; pyarrow.json ignores field metadata.
INT_OR_STRING = {b"dspark.json": b"integer|string"}


@dataclass(frozen=True)
class Column:
    """One flat column of a parsed body."""

    name: str
    paths: tuple[Path, ...]
    kind: str  # string | integer | number | boolean | any (int-or-string, kept as text) | length | timestamp
    is_list: bool

    @property
    def arrow_type(self) -> pa.DataType:
        if self.kind == "timestamp":
            return TIMESTAMP
        if self.kind == "length":
            return pa.int64()
        base = pa.string() if self.kind == "any" else ARROW_OF[self.kind]
        return pa.list_(base) if self.is_list else base

    @property
    def read_kind(self) -> str:
        """The leaf kind the JSON reader is asked for (text for mixed types)."""
        return "string" if self.kind == "any" else self.kind

    @property
    def star(self) -> int | None:
        """Position of `*` in the paths (the same in every alternative), or None."""
        return self.paths[0].index("*") if self.is_list else None


def _leaf_kind(body_schema: Mapping[str, Any], path: Path, where: str) -> str:
    node: Mapping[str, Any] = body_schema
    for segment in path:
        types = declared_types(node)
        if segment in ("0", "*"):
            if "array" not in types:
                raise ProfileError(f"{where}: '{segment}' in a path needs an array in the body schema")
            node = node.get("items", {})
        else:
            if "object" not in types:
                raise ProfileError(f"{where}: '{segment}' in a path needs an object in the body schema")
            properties = node.get("properties", {})
            if segment not in properties:
                raise ProfileError(f"{where}: the body schema has no field '{segment}'")
            node = properties[segment]
    leaf = declared_types(node)
    if len(leaf) == 1 and leaf[0] in ARROW_OF:
        return leaf[0]
    if leaf and all(t in ARROW_OF for t in leaf):
        return "any"
    if leaf == ["array"]:
        return "array"
    raise ProfileError(f"{where}: the field at {'.'.join(path)} is {leaf or 'untyped'}, not a primitive")


def body_columns(profile: Profile) -> tuple[Column, ...]:
    """The columns of `profile`, typed from its body schema."""
    columns = []
    for spec in profile.columns:
        name = spec["name"]
        raw = spec["path"]
        paths = tuple(tuple(p.split(".")) for p in ([raw] if isinstance(raw, str) else raw))
        where = f"{profile.source}: column '{name}'"
        stars = {p.index("*") if "*" in p else None for p in paths}
        if len(stars) != 1 or any(p.count("*") > 1 for p in paths):
            raise ProfileError(f"{where}: alternative paths must share one '*' at the same place")
        star = stars.pop()
        if star is not None and len({p[:star] for p in paths}) != 1:
            raise ProfileError(f"{where}: alternative paths must share the part before '*'")
        kinds = {_leaf_kind(profile.body_schema, p, where) for p in paths}
        if spec.get("reduce") == "length":
            if kinds != {"array"}:
                raise ProfileError(f"{where}: 'reduce: length' needs an array")
            columns.append(Column(name, paths, "length", False))
            continue
        if len(kinds) != 1 or "array" in kinds:
            raise ProfileError(f"{where}: alternative paths must have one primitive type, got {sorted(kinds)}")
        kind = kinds.pop()
        if paths == (("created",),):
            kind = "timestamp"
        columns.append(Column(name, paths, kind, star is not None))
    return tuple(columns)


def _tree_to_type(tree: dict[str, Any]) -> pa.DataType:
    fields = []
    for name, sub in tree.items():
        if isinstance(sub, pa.Field):
            fields.append(sub.with_name(name))
        else:
            fields.append(pa.field(name, sub if isinstance(sub, pa.DataType) else _subtree_type(sub)))
    return pa.struct(fields)


def _subtree_type(sub: dict[str, Any]) -> pa.DataType:
    # A subtree under an array marker becomes a list of what is below it.
    if "[]" in sub:
        inner = sub["[]"]
        if isinstance(inner, pa.Field):
            return pa.list_(inner.with_name("item"))
        return pa.list_(inner if isinstance(inner, pa.DataType) else _tree_to_type(inner))
    return _tree_to_type(sub)


def is_int_or_string(field: pa.Field) -> bool:
    """Whether a read-schema field is a leaf that holds an integer or a string (see `INT_OR_STRING`)."""
    return (field.metadata or {}).get(b"dspark.json") == INT_OR_STRING[b"dspark.json"]


def _insert(tree: dict[str, Any], path: Path, leaf: pa.DataType | pa.Field) -> None:
    node = tree
    for i, segment in enumerate(path):
        key = "[]" if segment in ("0", "*") else segment
        last = i == len(path) - 1
        if last:
            if key not in node:
                node[key] = leaf
        else:
            if key not in node or isinstance(node[key], (pa.DataType, pa.Field)):
                # An array counted by `reduce: length` may also be walked into by other columns.
                node[key] = {}
            node = node[key]


def read_schema(columns: Sequence[Column], created_unit: str, mixed_as: pa.DataType | None = None) -> pa.Schema:
    """The explicit schema the JSON readers parse bodies with: exactly the fields the columns walk.

    Fields that may be an integer or a string (`stop_reason`) are read as strings, or as `mixed_as`.
    """
    tree: dict[str, Any] = {}
    for column in columns:
        for path in column.paths:
            if column.kind == "length":
                _insert(tree, (*path, "*"), pa.struct([]))
                continue
            leaf: pa.DataType | pa.Field
            if column.kind == "timestamp":
                leaf = pa.string() if created_unit == "iso" else pa.int64()
            elif column.kind == "any":
                leaf = mixed_as or pa.field(path[-1], pa.string(), metadata=INT_OR_STRING)
            else:
                leaf = ARROW_OF[column.read_kind]
            _insert(tree, path, leaf)
    # Read only to recognise error responses; they become error rows.
    _insert(tree, ("error", "message"), pa.string())
    return pa.schema(_tree_to_type(tree))


def content_arrow_type(prop: ContentProperty) -> pa.DataType:
    if prop.kind == "json":
        return pa.string()
    if prop.kind == "array":
        assert prop.item_kind is not None
        return pa.list_(ARROW_OF[prop.item_kind])
    return ARROW_OF[prop.kind]


def content_read_schema(properties: Sequence[ContentProperty]) -> pa.Schema:
    """What the JSON readers parse content objects with (JSON-text properties are the native core's)."""
    return pa.schema([pa.field(p.name, content_arrow_type(p)) for p in properties if p.kind != "json"])


def output_schema(profile: Profile) -> pa.Schema:
    """The Arrow schema of parsed rows: `line`, the body columns, the content columns, `content_error`."""
    fields = [pa.field("line", pa.int64(), nullable=False)]
    fields += [pa.field(c.name, c.arrow_type) for c in body_columns(profile)]
    if profile.content_properties:
        fields += [pa.field(p.name, content_arrow_type(p)) for p in profile.content_properties]
        fields.append(pa.field("content_error", pa.string()))
    return pa.schema(fields)
