"""The exact path: one body (or one content string) at a time, with Python's `json`.

This is the reference semantics of the deserializer. The fast backends parse whole batches and hand every
body they cannot take (or might read differently) to this module, so a batch's result is always what this
module would give for each body, whichever backend ran. It is also what the tests compare the backends with.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from connector.profiles import ContentProperty
from connector.schema.columns import Column
from connector.schema.json_types import json_type

__all__ = ["Rejected", "body_values", "content_values", "decode_body", "load_json_object"]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Timestamps Flink's TIMESTAMP(3) can hold: years 1..9999, in milliseconds since the epoch.
MS_MIN, MS_MAX = -62135596800000, 253402300799999
_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\r?\n(.*?)\r?\n?```\Z", re.DOTALL)


class Rejected(Exception):
    """A body that cannot become a row: `reason` says why, `field` where (a dotted path) when known."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason if field is None else f"{field}: {reason}")
        self.reason = reason
        self.field = field


def load_json_object(text: str) -> dict[str, Any]:
    """`json.loads` that must give an object; raises `Rejected` saying what is wrong and where."""
    stripped = text.strip()
    if not stripped:
        raise Rejected("empty")
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            raise Rejected(f"trailing data after the JSON value at char {exc.pos}") from None
        if exc.pos >= len(stripped) or exc.msg.startswith("Unterminated string"):
            raise Rejected(f"truncated JSON: input ends at char {len(stripped)} ({exc.msg})") from None
        raise Rejected(f"not JSON: {exc.msg.removesuffix(' at')} at char {exc.pos}") from None
    except RecursionError:
        raise Rejected("not JSON: nested too deeply") from None
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
            raise Rejected(f"not an ISO-8601 timestamp: {value[:40]!r}", where) from None
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
        parts = [f"{k}={detail[k]}" for k in ("type", "code") if detail.get(k) is not None]
        message = detail.get("message")
        raise Rejected(
            "error response" + (f" ({', '.join(parts)})" if parts else "") + (f": {message}" if message else ""),
            "error" if error is not None else None,
        )
    row: dict[str, Any] = {}
    for column in columns:
        row[column.name] = _column_value(obj, column, created_unit)
    return row


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
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(f"invalid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}") from None
    try:
        obj = load_json_object(text)
    except Rejected as exc:
        raise Rejected("empty body" if exc.reason == "empty" else exc.reason) from None
    return body_values(obj, columns, created_unit)


# -- content: what the model wrote inside choices[0].message.content ----------------------------------------


def unfence(text: str) -> str:
    """Content wrapped in one markdown code fence (```json ... ```), unwrapped; other text unchanged."""
    match = _FENCE.match(text.strip())
    return match.group(1) if match else text


def _content_leaf(value: Any, prop: ContentProperty) -> Any:
    if prop.kind == "json":
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except ValueError:
            raise Rejected("wrong type: NaN or Infinity in a JSON value", prop.name) from None
    if prop.kind == "array":
        if not isinstance(value, list):
            raise Rejected(f"wrong type: expected array, got {json_type(value)}", prop.name)
        assert prop.item_kind is not None
        return [_leaf(v, prop.item_kind, f"{prop.name}[{i}]", "seconds") for i, v in enumerate(value)]
    return _leaf(value, prop.kind, prop.name, "seconds")


def content_values(text: str | None, properties: Sequence[ContentProperty]) -> tuple[dict[str, Any], str | None]:
    """Content text -> (values of the content properties, content_error or None).

    JSON objects (optionally in a ``` fence) are read against the properties' types; a property of the wrong
    type is left null and named in the error. Free text is read with the properties' `x-extract` patterns
    when the profile has any; otherwise it is an error.
    """
    empty: dict[str, Any] = {p.name: None for p in properties}
    if text is None:
        return empty, None
    body = unfence(text)
    stripped = body.lstrip()
    if not stripped.startswith(("{", "[")) and any(p.extract for p in properties):
        return extract_from_text(text, properties)
    try:
        obj = load_json_object(body)
    except Rejected as exc:
        return empty, "empty content" if exc.reason == "empty" else exc.reason
    values = dict(empty)
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


def extract_from_text(text: str, properties: Sequence[ContentProperty]) -> tuple[dict[str, Any], str | None]:
    """Content properties read from free text with their `x-extract` patterns (group 1, else the whole match)."""
    values: dict[str, Any] = {}
    error = None
    for prop in properties:
        values[prop.name] = None
        if prop.extract is None:
            continue
        pattern, mode = prop.extract.pattern, prop.extract.mode
        if mode == "count":
            values[prop.name] = len(pattern.findall(text))
            continue
        if prop.kind == "boolean":
            values[prop.name] = pattern.search(text) is not None
            continue
        group = 1 if pattern.groups else 0
        if mode == "first" and prop.kind == "string":  # the common case, with nothing to convert
            found = pattern.search(text)
            values[prop.name] = None if found is None else found.group(group)
            continue
        if mode == "first":
            found = pattern.search(text)
            matches = [] if found is None else [found.group(group)]
        else:
            matches = [m.group(group) for m in pattern.finditer(text)]
        try:
            if mode == "all":
                if prop.kind == "json":
                    values[prop.name] = _content_leaf([_embedded_json(m, prop.name) for m in matches], prop)
                else:
                    assert prop.item_kind is not None
                    values[prop.name] = [_text_scalar(m, prop.item_kind, prop.name) for m in matches]
            elif matches:
                chosen = matches[-1] if mode == "last" else matches[0]
                if prop.kind == "json":
                    values[prop.name] = _content_leaf(_embedded_json(chosen, prop.name), prop)
                else:
                    values[prop.name] = _text_scalar(chosen, prop.kind, prop.name)
        except Rejected as exc:
            values[prop.name] = None
            error = error or f"property '{exc.field}': {exc.reason}"
    return values, error


def _embedded_json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise Rejected(f"not JSON: {text[:40]!r}", name) from None


def _text_scalar(text: str, kind: str, name: str) -> Any:
    if kind == "string":
        return text
    try:
        if kind == "integer":
            return _integer(int(text.strip()), name)
        if kind == "number":
            number = float(text.strip())
            if math.isfinite(number):
                return number
        if kind == "boolean" and text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
    except ValueError:
        pass
    raise Rejected(f"wrong type: expected {kind}, got {text[:40]!r}", name)
