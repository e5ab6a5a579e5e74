"""Content properties read from free text with their `x-extract` patterns: RE2, over a whole column at once.

Patterns are RE2 (linear in the text, whatever the pattern or the text: a model caught in a repetition
loop cannot stall a slot), with `.` matching newlines. The first match, its presence and the number of
matches are taken by pyarrow.compute over the column (`extract_regex`, `match_substring_regex`,
`count_substring_regex`, all RE2); all matches and the last one, which pyarrow has no function for, by
the RE2 binding (`google-re2`) text by text. The value is group 1, or the whole match when the pattern
has no group (a group that took no part in the match gives "").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import re2

from connector.profiles import ContentProperty, Extractor
from connector.strict import Rejected, loads
from connector.types.columns import content_arrow_type
from tests.oracle.exact import INT64_MAX, INT64_MIN, json_text
from tests.oracle.quoting import quoted

__all__ = ["extract", "text_scalar"]


def extract(texts: pa.Array, properties: Sequence[ContentProperty]) -> tuple[dict[str, pa.Array], pa.Array]:
    """The content columns of free texts (a string array without nulls) and their `content_error`s.

    A property without a pattern is null; a value that cannot take the property's type is null and named
    in the error (the first such property of a text).
    """
    import pyarrow.compute as pc  # imported here: it is 25 ms of `dspark-vllm parse`'s start, which seldom needs it

    n = len(texts)
    columns: dict[str, pa.Array] = {}
    errors: list[str | None] = [None] * n
    for prop in properties:
        extractor = prop.extract
        if extractor is None:
            columns[prop.name] = pa.nulls(n, content_arrow_type(prop))
            continue
        if extractor.mode == "count":
            columns[prop.name] = pc.count_substring_regex(texts, extractor.source).cast(pa.int64())
            continue
        if extractor.mode == "first" and prop.kind == "boolean":
            columns[prop.name] = pc.match_substring_regex(texts, extractor.source)
            continue
        if extractor.mode == "first" and extractor.arrow_pattern is not None:
            found = pc.struct_field(pc.extract_regex(texts, extractor.arrow_pattern), [extractor.arrow_group])
            if prop.kind == "string":
                columns[prop.name] = found
                continue
            chosen: list[Any] = found.to_pylist()
        else:
            chosen = [_matches(extractor, text) for text in texts.to_pylist()]
        convert = _converter(prop)
        values: list[Any] = [None] * n
        for i, value in enumerate(chosen):
            if value is None:
                continue
            try:
                values[i] = convert(value)
            except Rejected as exc:
                if errors[i] is None:
                    errors[i] = f"property '{exc.field}': {exc.reason}"
        columns[prop.name] = pa.array(values, content_arrow_type(prop))
    return columns, pa.array(errors, pa.string())


def _matches(extractor: Extractor, text: str) -> Any:
    """What `all` (every match) and `last` (the last match, or None) take from one text; `first` where its
    pattern could not be given to pyarrow."""
    # str in, str out: the binding maps byte offsets to characters as it goes (linear), and steps past an
    # empty match by a character, never into the middle of one.
    group = 1 if extractor.pattern.groups else 0
    if extractor.mode == "first":
        found = extractor.pattern.search(text)
        return None if found is None else found.group(group) or ""
    matches = [m.group(group) or "" for m in extractor.pattern.finditer(text)]
    if extractor.mode == "all":
        return matches
    return matches[-1] if matches else None


def _converter(prop: ContentProperty) -> Callable[[Any], Any]:
    name = prop.name
    if prop.kind == "json":
        if prop.extract is not None and prop.extract.mode == "all":
            return lambda matches: json_text([_embedded(m, name) for m in matches])
        return lambda match: json_text(_embedded(match, name))
    if prop.kind == "array":
        item_kind = prop.item_kind
        assert item_kind is not None
        return lambda matches: [text_scalar(m, item_kind, name) for m in matches]
    kind = prop.kind
    return lambda match: text_scalar(match, kind, name)


def _embedded(text: str, name: str) -> Any:
    try:
        return loads(text)
    except Rejected:
        raise Rejected(f"not JSON: {quoted(text[:40])}", name) from None


def text_scalar(text: str, kind: str, name: str) -> Any:
    """A matched text as a content property of `kind` (string, integer, number, boolean)."""
    if kind == "string":
        return text
    stripped = text.strip(" \t\n\r")
    if kind == "integer" and _INTEGER.fullmatch(stripped):
        # Digits beyond 20 are out of range anyway; int() would also refuse them past 4,300.
        if len(stripped) <= 20 and INT64_MIN <= int(stripped) <= INT64_MAX:
            return int(stripped)
        raise Rejected("out of range for a 64-bit integer", name)
    if kind == "number" and _NUMBER.fullmatch(stripped):
        number = float(stripped)
        if number not in (float("inf"), float("-inf")):
            return number
    if kind == "boolean" and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    raise Rejected(f"wrong type: expected {kind}, got {quoted(text[:40])}", name)


_INTEGER = re2.compile(r"[-+]?[0-9]+")
_NUMBER = re2.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
