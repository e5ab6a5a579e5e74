"""The CPU reader: each record decoded by msgspec into structs made for the columns, then columns built from them.

A profile's columns walk a few paths of a large body; msgspec decodes exactly those (a struct per object on
the way, typed leaves) and skips the rest without making Python objects of it. The decode checks the types
the columns need: a record it refuses (`"created": "x"`, `choices` an object) is left to the exact path,
which says why, as it does for anything the JSON screen (`strict.screen`, run first) refused.

Typed like the exact path's leaves: a string is a str, an integer an int (not a float, not a bool), a
number an int or a float (as a float), a boolean a bool, an int-or-string either; null is null. What the
structs do not decide is checked over the columns: integers beyond 64 bits, timestamps outside years
1..9999, error responses (`error` not null, `"object": "error"`). Those rows are flagged for the exact path.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from connector.decode.exact import INT64_MAX, INT64_MIN, json_text
from connector.decode.flatten import created_ms
from connector.profiles import ContentProperty
from connector.schema.columns import TIMESTAMP, Column, content_arrow_type

__all__ = ["BodyReader", "ContentReader"]

_LEAF: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "any": int | str}
_ANY = "json"  # a leaf of any JSON value (decoded only when present)
_ELEMENT = "[]"  # the key of a list's element in the tree


def _insert(tree: dict[str, Any], path: Sequence[str], leaf: str | dict[str, Any]) -> None:
    node = tree
    for i, segment in enumerate(path):
        key = _ELEMENT if segment in ("0", "*") else segment
        if i == len(path) - 1:
            if key not in node or (isinstance(leaf, dict) and not isinstance(node[key], dict)):
                node[key] = leaf
        else:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]


def _struct_type(tree: dict[str, Any], name: str) -> Any:
    """The msgspec type of a tree node: a struct for an object (fields f0, f1... renamed to the JSON names)."""
    if _ELEMENT in tree and len(tree) == 1:
        element = tree[_ELEMENT]
        # An array only counted (`reduce: length`): its elements may be anything, and are not decoded.
        return list[msgspec.Raw] if element == {} else list[_type(element, name + "_item") | None]  # type: ignore[misc]
    fields = [(f"f{i}", _type(child, f"{name}_{i}") | None, None) for i, child in enumerate(tree.values())]
    # gc=False: decoded values cannot form reference cycles, and untracked structs are cheaper to make.
    return msgspec.defstruct(name, fields, rename=dict(zip((f[0] for f in fields), tree, strict=True)), gc=False)


def _type(node: str | dict[str, Any], name: str) -> Any:
    if isinstance(node, dict):
        return _struct_type(node, name)
    return Any if node == _ANY else _LEAF[node]


def _attribute(tree: dict[str, Any], key: str) -> Callable[[Any], Any]:
    return attrgetter(f"f{list(tree).index(key)}")


def _step(values: list[Any], get: Callable[[Any], Any]) -> list[Any]:
    try:
        return list(map(get, values))
    except AttributeError:  # a null on the way: rarer than not, and `None in values` costs nearly a map
        return [None if v is None else get(v) for v in values]


def _node(tree: dict[str, Any], path: Sequence[str]) -> Any:
    for segment in path:
        tree = tree[_ELEMENT if segment in ("0", "*") else segment]
    return tree


class _Walker:
    """Values at a path for every row, each path prefix computed once for all the columns under it.

    At a path through `*` the values are those of every element of every row's list, one after another.
    """

    def __init__(self, tree: dict[str, Any], roots: list[Any]) -> None:
        self.tree = tree
        self.cache: dict[tuple[str, ...], list[Any]] = {(): roots}

    def values(self, path: Sequence[str]) -> list[Any]:
        key = tuple(path)
        found = self.cache.get(key)
        if found is None:
            parent = self.values(key[:-1])
            if key[-1] == "0":
                found = [v[0] if v else None for v in parent]
            elif key[-1] == "*":
                found = list(itertools.chain.from_iterable(v for v in parent if v))
            else:
                found = _step(parent, _attribute(_node(self.tree, key[:-1]), key[-1]))
            self.cache[key] = found
        return found


def _coalesce(alternatives: list[list[Any]]) -> list[Any]:
    out = alternatives[0]
    for other in alternatives[1:]:
        if other.count(None) != len(other):
            out = [a if a is not None else b for a, b in zip(out, other, strict=True)]
    return out


def _int64(values: list[Any], bad: np.ndarray | None) -> pa.Array:
    """An int64 array of ints or None; values beyond 64 bits are null and flagged in `bad` (else raised)."""
    try:
        return pa.array(values, pa.int64())
    except (OverflowError, pa.ArrowInvalid):
        if bad is None:
            raise
    out_of_range = [v is not None and not INT64_MIN <= v <= INT64_MAX for v in values]
    bad |= np.array(out_of_range, dtype=bool)
    return pa.array([None if o else v for v, o in zip(values, out_of_range, strict=True)], pa.int64())


def _leaf_array(values: list[Any], kind: str, arrow_type: pa.DataType, bad: np.ndarray) -> pa.Array:
    """Leaf values of one kind as an Arrow array; rows the exact path must decide are flagged in `bad`."""
    if kind == "integer":
        return _int64(values, bad)
    if kind == "any" and values.count(None) != len(values):
        ints = [type(v) is int for v in values]
        if any(ints):
            as_int = _int64([v if i else None for v, i in zip(values, ints, strict=True)], bad)
            texts = as_int.cast(pa.string()).to_pylist()
            values = [t if i else v for v, t, i in zip(values, texts, ints, strict=True)]
    return pa.array(values, arrow_type)


def _list_array(lists: list[Any], values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A list array of `values` cut as `lists` is (null where it is null), and each value's row."""
    lengths = np.fromiter(map(len, (v or () for v in lists)), dtype=np.int32, count=len(lists))
    offsets = np.zeros(len(lists) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    mask = None
    if None in lists:
        mask = np.append(np.array([v is None for v in lists], dtype=bool), False)
    array = pa.ListArray.from_arrays(pa.array(offsets, pa.int32(), mask=mask), values)
    return array, np.repeat(np.arange(len(lists)), lengths)


def _decode_all(decode: Callable[[Any], Any], records: Sequence[Any]) -> tuple[list[Any], np.ndarray]:
    roots: list[Any] = []
    taken: list[int] = []
    for i, record in enumerate(records):
        try:
            roots.append(decode(record))
        except msgspec.DecodeError:  # ValidationError included: a type the columns cannot take
            continue
        taken.append(i)
    return roots, np.array(taken, dtype=np.int64)


class BodyReader:
    """Decodes bodies into the columns of a profile (built once per profile: see `batch._plan`)."""

    def __init__(self, columns: Sequence[Column], created_unit: str) -> None:
        self._columns = tuple(columns)
        self.created_unit = created_unit
        tree: dict[str, Any] = {}
        for column in self._columns:
            for path in column.paths:
                if column.kind == "length":
                    _insert(tree, (*path, "*"), {})
                elif column.kind == "timestamp":
                    _insert(tree, path, "string" if created_unit == "iso" else "integer")
                else:
                    _insert(tree, path, column.kind)
        # Read to recognise error responses, which the exact path turns into error rows.
        for name in ("error", "object"):
            if name not in tree:
                tree[name] = _ANY
        self.tree = tree
        self._decode = msgspec.json.Decoder(_struct_type(tree, "Body")).decode

    def decode(self, records: Sequence[bytes]) -> tuple[list[Any], np.ndarray]:
        """The decoded records, and their positions in `records` (the others are left to the exact path)."""
        return _decode_all(self._decode, records)

    def columns(self, roots: list[Any]) -> tuple[dict[str, pa.Array], np.ndarray]:
        """The columns of decoded records, and a mask of the rows the exact path must decide."""
        n = len(roots)
        walk = _Walker(self.tree, roots)
        bad = np.zeros(n, dtype=bool)
        errors, objects = walk.values(("error",)), walk.values(("object",))
        if errors.count(None) != n:
            bad |= np.array([v is not None for v in errors], dtype=bool)
        if "error" in objects:
            bad |= np.array([v == "error" for v in objects], dtype=bool)
        arrays: dict[tuple[Any, ...], pa.Array] = {}
        return {column.name: self._column(walk, column, bad, arrays) for column in self._columns}, bad

    def _column(
        self, walk: _Walker, column: Column, bad: np.ndarray, arrays: dict[tuple[Any, ...], pa.Array]
    ) -> pa.Array:
        def leaves(
            paths: tuple[tuple[str, ...], ...], kind: str, arrow_type: pa.DataType, flags: np.ndarray
        ) -> pa.Array:
            # Columns that read the same values (content and choice_contents of one-choice bodies) share them.
            key = (paths, kind)
            if key not in arrays:
                arrays[key] = _leaf_array(_coalesce([walk.values(p) for p in paths]), kind, arrow_type, flags)
            return arrays[key]

        if column.kind == "length":
            lists = walk.values(column.paths[0])
            return pa.array([None if v is None else len(v) for v in lists], pa.int64())
        star = column.star
        if star is None:
            if column.kind == "timestamp":
                kind = "string" if self.created_unit == "iso" else "integer"
                raw = leaves(column.paths, kind, pa.string() if kind == "string" else pa.int64(), bad)
                ms, outside = created_ms(raw, self.created_unit)
                bad |= outside
                return ms.cast(TIMESTAMP)
            return leaves(column.paths, column.kind, column.arrow_type, bad)
        lists = walk.values(column.paths[0][:star])
        n = len(lists)
        if lists.count(None) == n:
            return pa.nulls(n, column.arrow_type)
        value_type = column.arrow_type.value_type
        if None not in lists and all(len(v) == 1 for v in lists):
            # One element each (one choice): the values are those of element 0.
            firsts = tuple((*p[:star], "0", *p[star + 1 :]) for p in column.paths)
            offsets = pa.array(np.arange(n + 1, dtype=np.int32))
            return pa.ListArray.from_arrays(offsets, leaves(firsts, column.kind, value_type, bad))
        item_bad = np.zeros(len(walk.values(column.paths[0][: star + 1])), dtype=bool)
        array, row_of = _list_array(lists, leaves(column.paths, column.kind, value_type, item_bad))
        if item_bad.any():
            bad[row_of[item_bad]] = True
        return array


class ContentReader:
    """Decodes contents that are JSON objects into the content columns (built once per profile)."""

    def __init__(self, properties: Sequence[ContentProperty]) -> None:
        self.properties = tuple(properties)
        tree: dict[str, Any] = {}
        for prop in self.properties:
            if prop.kind == "json":
                tree[prop.name] = _ANY
            elif prop.kind == "array":
                assert prop.item_kind is not None
                tree[prop.name] = {_ELEMENT: prop.item_kind}
            else:
                tree[prop.name] = prop.kind
        self.tree = tree
        self._decode = msgspec.json.Decoder(_struct_type(tree, "Content")).decode

    def read(self, texts: Sequence[str]) -> tuple[dict[str, pa.Array], np.ndarray, np.ndarray]:
        """The content columns of the texts the struct took, their positions in `texts`, and a mask (over
        those) of the ones the exact path must decide (an integer beyond 64 bits)."""
        roots, taken = _decode_all(self._decode, texts)
        n = len(roots)
        bad = np.zeros(n, dtype=bool)
        out: dict[str, pa.Array] = {}
        for prop in self.properties:
            values = _step(roots, _attribute(self.tree, prop.name))
            arrow_type = content_arrow_type(prop)
            if prop.kind == "json":
                out[prop.name] = pa.array([None if v is None else json_text(v) for v in values], pa.string())
            elif prop.kind == "array":
                assert prop.item_kind is not None
                items = list(itertools.chain.from_iterable(v for v in values if v))
                item_bad = np.zeros(len(items), dtype=bool)
                array, row_of = _list_array(values, _leaf_array(items, prop.item_kind, arrow_type.value_type, item_bad))
                if item_bad.any():
                    bad[row_of[item_bad]] = True
                out[prop.name] = array
            else:
                out[prop.name] = _leaf_array(values, prop.kind, arrow_type, bad)
        return out, taken, bad
