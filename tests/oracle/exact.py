"""The exact path: one body (or one content string) at a time, with Python's `json`: the reference.

This is the reference semantics of the deserializer, with the tests: the native core (native/dspark_exact.cpp
is its port) and the gpu backend are held to give, for every body, what this module gives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from connector.profiles import ContentProperty
from connector.strict import MAX_BODY_BYTES, Rejected, loads
from connector.types.columns import MS_MAX, MS_MIN, Column
from connector.types.json_types import json_type
from tests.oracle.quoting import quoted

__all__ = [
    "Rejected",
    "body_values",
    "decode_body",
    "json_content_values",
    "json_text",
    "load_json_object",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def load_json_object(text: str) -> dict[str, Any]:
    """The JSON object in `text` (the rules of `connector.strict`); raises `Rejected` saying why not."""
    value = loads(text)
    if not isinstance(value, dict):
        raise Rejected(f"not a JSON object: got {json_type(value)}")
    return value


def _display(path: Sequence[str]) -> str:
    out = ""
    for segment in path:
        if segment in ("0", "*"):
            out += f"[{segment}]"
        else:
            out += f".{segment}" if out else segment
    return out


def _walk(node: Any, path: Sequence[str], done: list[str]) -> Any:
    """Follow `path` (no `*`) from `node`: None when a step is absent, Rejected when one has a wrong type."""
    for segment in path:
        if node is None:
            return None
        if segment == "0":
            if not isinstance(node, list):
                raise Rejected(f"wrong type: expected array, got {json_type(node)}", _display(done))
            node = node[0] if node else None
        else:
            if not isinstance(node, dict):
                raise Rejected(f"wrong type: expected object, got {json_type(node)}", _display(done))
            node = node.get(segment)
        done.append(segment)
    return node


def _leaf(value: Any, kind: str, where: str, created_unit: str) -> Any:
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, str):
            return _utf8(value, where)
    elif kind == "integer":
        return _integer(value, where)
    elif kind == "number":
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise Rejected("out of range for a double", where) from None
    elif kind == "boolean":
        if isinstance(value, bool):
            return value
    elif kind == "any":
        if isinstance(value, str):
            return _utf8(value, where)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(_integer(value, where))
    elif kind == "timestamp":
        return _timestamp(value, where, created_unit)
    expected = "integer or string" if kind == "any" else kind
    raise Rejected(f"wrong type: expected {expected}, got {json_type(value)}", where)


def _utf8(value: str, where: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Rejected("invalid string: unpaired surrogate escape", where) from None
    return value


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Rejected(f"wrong type: expected integer, got {json_type(value)}", where)
    if isinstance(value, float):
        if not value.is_integer():
            raise Rejected(f"wrong type: expected integer, got number {value!r}", where)
        value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise Rejected("out of range for a 64-bit integer", where)
    return value


def _timestamp(value: Any, where: str, unit: str) -> int:
    """Epoch milliseconds (UTC) of a `created` value in the profile's unit."""
    if unit == "iso":
        if not isinstance(value, str):
            raise Rejected(f"wrong type: expected an ISO-8601 string, got {json_type(value)}", where)
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise Rejected(f"not an ISO-8601 timestamp: {quoted(value[:40])}", where) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
        ms = delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
    else:
        number = _integer(value, where)
        ms = number * 1000 if unit == "seconds" else number
    if not MS_MIN <= ms <= MS_MAX:
        raise Rejected(f"out of range: {value} ({unit}) is not within years 1..9999", where)
    return ms


def body_values(obj: Mapping[str, Any], columns: Sequence[Column], created_unit: str) -> dict[str, Any]:
    """The column values of one decoded body (`created` as epoch ms); raises `Rejected`."""
    error = obj.get("error")
    if error is not None or obj.get("object") == "error":
        detail = error if isinstance(error, dict) else obj if error is None else {"message": error}
        parts = [f"{k}={_shown(detail[k])}" for k in ("type", "code") if detail.get(k) is not None]
        message = detail.get("message")
        said = f": {_shown(message)}" if message else ""
        raise Rejected(
            "error response" + (f" ({', '.join(parts)})" if parts else "") + said,
            "error" if error is not None else None,
        )
    row: dict[str, Any] = {}
    for column in columns:
        row[column.name] = _column_value(obj, column, created_unit)
    return row


def _shown(detail: Any) -> str:
    """An error response's detail in its message: a string as it is, an integer in decimal, anything else
    (an object, an array, a boolean, a float) as compact JSON text."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, int) and not isinstance(detail, bool):
        return str(detail)
    return json_text(detail)


def _column_value(obj: Mapping[str, Any], column: Column, created_unit: str) -> Any:
    if column.kind == "length":
        done: list[str] = []
        value = _walk(obj, column.paths[0], done)
        if value is None:
            return None
        if not isinstance(value, list):
            raise Rejected(f"wrong type: expected array, got {json_type(value)}", _display(done))
        return len(value)
    star = column.star
    if star is None:
        result = None
        for path in column.paths:
            done = []
            value = _leaf(_walk(obj, path, done), column.kind, _display(path), created_unit)
            if result is None:
                result = value
        return result
    done = []
    items = _walk(obj, column.paths[0][:star], done)
    if items is None:
        return None
    if not isinstance(items, list):
        raise Rejected(f"wrong type: expected array, got {json_type(items)}", _display(done))
    out = []
    for i, item in enumerate(items):
        element = None
        for path in column.paths:
            where = [*path[:star], str(i)]
            value = _leaf(_walk(item, path[star + 1 :], where), column.kind, _display(path), created_unit)
            if element is None:
                element = value
        out.append(element)
    return out


def decode_body(raw: bytes, columns: Sequence[Column], created_unit: str) -> dict[str, Any]:
    """Raw body bytes -> column values; raises `Rejected`."""
    if len(raw) > MAX_BODY_BYTES:
        raise Rejected(f"body too large: over {MAX_BODY_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(f"invalid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}") from None
    try:
        obj = load_json_object(text)
    except Rejected as exc:
        raise Rejected("empty body" if exc.reason == "empty" else exc.reason, exc.field) from None
    return body_values(obj, columns, created_unit)


# -- content that is JSON (free text and the batch: `connector.parse.content`) --------------------------------


def json_text(value: Any) -> str:
    """A JSON value as the compact text a JSON-typed content column holds."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _content_leaf(value: Any, prop: ContentProperty) -> Any:
    if prop.kind == "json":
        return json_text(value)
    if prop.kind == "array":
        if not isinstance(value, list):
            raise Rejected(f"wrong type: expected array, got {json_type(value)}", prop.name)
        assert prop.item_kind is not None
        return [_leaf(v, prop.item_kind, f"{prop.name}[{i}]", "seconds") for i, v in enumerate(value)]
    return _leaf(value, prop.kind, prop.name, "seconds")


def json_content_values(text: str, properties: Sequence[ContentProperty]) -> tuple[dict[str, Any], str | None]:
    """A content meant as a JSON object -> (values of the content properties, content_error or None).

    A property of the wrong type is left null and named in the error.
    """
    values: dict[str, Any] = {p.name: None for p in properties}
    try:
        obj = load_json_object(text)
    except Rejected as exc:
        if exc.field is not None:
            return values, f"property '{exc.field}': {exc.reason}"
        return values, "empty content" if exc.reason == "empty" else exc.reason
    error = None
    for prop in properties:
        value = obj.get(prop.name)
        if value is None:
            continue
        try:
            values[prop.name] = _content_leaf(value, prop)
        except Rejected as exc:
            error = error or f"property '{exc.field}': {exc.reason}"
    return values, error
