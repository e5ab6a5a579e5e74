"""Answers in the shape a request declares: values that keep to a JSON Schema, and answers that break one.

Pure (no I/O): a function of a `random.Random` and the schema. `value_for` writes what a server with structured
outputs writes: every `type`, `enum`/`const`, `anyOf`/`oneOf` (a branch drawn at random, so a nullable field is
null about half the time, as a real model answers), integer and number bounds (integers exact to 64 bits and
beyond; a DECIMAL(p, s) bound, 10^(p-s) - 10^-s, gets numbers of at most s fraction digits), strings by
`pattern` (a small generator for character classes, groups, alternation and quantifiers; the date, time and
timestamp patterns give real calendar dates), `maxLength`/`minLength`, a few formats, arrays with
`minItems`/`maxItems`, objects with `properties`/`required` and maps (`additionalProperties` as a schema).
`break_answer` is what a server that ignored the schema writes: a required field missing, a field of the wrong
type, a field the schema does not have, or a string longer than its bound.

    >>> import random
    >>> value_for(random.Random(1), {"type": "integer", "minimum": -128, "maximum": 127}) in range(-128, 128)
    True
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import random
import re
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from connector.types.json_types import json_type

__all__ = ["BREAK_WAYS", "break_answer", "pattern_string", "value_for"]

# How an answer that ignored its schema is wrong (the ignore-schema fault draws one that applies).
BREAK_WAYS = ("missing", "wrong-type", "extra", "too-long")

_WORDS = ("alpha", "delta", "river", "stone", "cloud", "amber", "north", "quiet", "maple", "ember", "cedar")
# Text a model writes: accents, CJK, a dash, quotes and a backslash (which JSON must escape), an emoji.
_TEXT = (
    "The results suggest a steady improvement over the baseline. ",
    'Throughput depends on batch size; "short" prompts are cheap. ',
    "Voilà le résumé — tout s'est bien passé. ",
    "这个结果说明批处理的大小很重要。 ",
    "A path like C:\\data\\in.json needs escaping. ",
    "Great value, would buy again 👍 ",
    "Größe: mittel / Farbe: grün. ",
)
# Characters drawn for a negated class or `.`: mostly letters, some punctuation JSON escapes, some non-ASCII.
_POOL = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789     "
    "abcdefghijklmnopqrstuvwxyz.,;:!?-_'\"\\/()[]{}<>@#%&*+=~`^|$éüßñçøåæ中文字日本語한국어—–…€£¥°±×÷"
)
_MAP_KEYS = ("colour", "size", "größe", "键", 'say "hi"', "a\\b", "x y", "0", "")
_EDGE = 0.08  # share of bounded integers and numbers drawn at a bound (the values that overflow when mistyped)
_MAX_DEPTH = 4  # deeper, arrays take their fewest items and optional properties are left out
_RUN_CAP = 64  # characters of text beyond a run's minimum drawn at most, when the bound is larger or absent


# --- regular expressions -> strings --------------------------------------------------------------------------------


class _Unsupported(Exception):
    """A pattern feature the generator does not write for (lookaround, back-references, word boundaries)."""


_Node = tuple[Any, ...]
_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0D), (0x20, 0x20))
_CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}


class _Parser:
    """ECMA-262 regular expressions as JSON Schema writes them, the subset structured outputs use, to a tree:
    ("seq", [..]), ("alt", [..]), ("set", negated, ranges), ("rep", node, lo, hi | None), ("bol",), ("eol",)."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def parse(self) -> _Node:
        node = self._alt()
        if self.i != len(self.p):
            raise _Unsupported(f"unexpected {self.p[self.i]!r}")
        return node

    def _peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def _alt(self) -> _Node:
        branches = [self._seq()]
        while self._peek() == "|":
            self.i += 1
            branches.append(self._seq())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def _seq(self) -> _Node:
        items: list[_Node] = []
        while self.i < len(self.p) and self._peek() not in "|)":
            items.append(self._quantified(self._atom()))
        return ("seq", items)

    def _atom(self) -> _Node:
        ch = self.p[self.i]
        self.i += 1
        if ch == "^":
            return ("bol",)
        if ch == "$":
            return ("eol",)
        if ch == ".":
            return ("set", True, ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)))
        if ch == "(":
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self._peek() == "?":
                raise _Unsupported("lookaround or named group")
            node = self._alt()
            if self._peek() != ")":
                raise _Unsupported("unclosed group")
            self.i += 1
            return node
        if ch == "[":
            return self._class()
        if ch == "\\":
            return self._escape(in_class=False)
        if ch in "*+?":
            raise _Unsupported("nothing to repeat")
        return ("set", False, ((ord(ch), ord(ch)),))

    def _escape(self, in_class: bool) -> _Node:
        if self.i >= len(self.p):
            raise _Unsupported("trailing backslash")
        ch = self.p[self.i]
        self.i += 1
        sets = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
        if ch.lower() in sets:
            if ch.isupper() and in_class:
                raise _Unsupported("negated class escape inside a class")
            return ("set", ch.isupper(), sets[ch.lower()])
        if ch in "ux":
            width = 4 if ch == "u" else 2
            digits = self.p[self.i : self.i + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise _Unsupported(f"bad \\{ch} escape")
            self.i += width
            code = int(digits, 16)
            return ("set", False, ((code, code),))
        if ch in _CONTROL_ESCAPES:
            code = ord(_CONTROL_ESCAPES[ch])
            return ("set", False, ((code, code),))
        if ch.isdigit() or ch in "bBkpP":
            raise _Unsupported(f"\\{ch}")
        return ("set", False, ((ord(ch), ord(ch)),))

    def _class_char(self) -> _Node:
        ch = self.p[self.i]
        self.i += 1
        if ch == "\\":
            return self._escape(in_class=True)
        return ("set", False, ((ord(ch), ord(ch)),))

    def _class(self) -> _Node:
        negated = self._peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.i >= len(self.p):
                raise _Unsupported("unclosed class")
            if self._peek() == "]" and not first:
                self.i += 1
                break
            first = False
            low = self._class_char()
            if self._peek() == "-" and self.p[self.i + 1 : self.i + 2] not in ("]", ""):
                self.i += 1
                high = self._class_char()
                if len(low[2]) != 1 or len(high[2]) != 1 or low[2][0][0] != low[2][0][1]:
                    raise _Unsupported("a range of classes")
                ranges.append((low[2][0][0], high[2][0][0]))
            else:
                ranges.extend(low[2])
        return ("set", negated, tuple(ranges))

    def _quantified(self, node: _Node) -> _Node:
        while True:
            ch = self._peek()
            if ch == "*":
                bounds: tuple[int, int | None] = (0, None)
                self.i += 1
            elif ch == "+":
                bounds = (1, None)
                self.i += 1
            elif ch == "?":
                bounds = (0, 1)
                self.i += 1
            elif ch == "{" and (m := re.compile(r"\{(\d+)(,(\d*))?\}").match(self.p, self.i)):
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                bounds = (lo, hi)
                self.i = m.end()
            else:
                return node
            if self._peek() == "?":  # lazy: the same strings
                self.i += 1
            node = ("rep", node, *bounds)


def _in(ranges: Sequence[tuple[int, int]], code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in ranges)


def _char(rng: random.Random, node: _Node, bmp: bool) -> str:
    _, negated, ranges = node
    if not negated:
        lo, hi = ranges[int(rng.random() * len(ranges))]
        if bmp:
            hi = min(hi, 0xFFFF)
        for _ in range(16):
            code = lo + int(rng.random() * (hi - lo + 1))
            if not 0xD800 <= code <= 0xDFFF:
                return chr(code)
        return chr(lo)
    for _ in range(32):
        ch = _POOL[int(rng.random() * len(_POOL))]
        if not _in(ranges, ord(ch)):
            return ch
    for _ in range(256):
        code = 0x20 + int(rng.random() * 0xFFDF)
        if not _in(ranges, code) and not 0xD800 <= code <= 0xDFFF:
            return chr(code)
    raise _Unsupported("a class that excludes everything")


def _run_length(rng: random.Random, lo: int, hi: int | None, cap: int = _RUN_CAP) -> int:
    top = lo + cap if hi is None else min(hi, lo + cap)
    r = rng.random()
    if hi is not None and hi <= 256 and r < 0.1:
        return hi  # the longest string the bound allows: where a length check would be off by one
    if r < 0.2:
        return lo
    return lo + int(rng.random() * (top - lo + 1))


@functools.lru_cache(maxsize=256)
def _excluded(node: _Node, bmp: bool) -> re.Pattern[str]:
    """A character a set does not admit (or, with `bmp`, one beyond the Basic Multilingual Plane)."""
    ranges = "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in node[2])
    astral = "\\U00010000-\\U0010ffff" if bmp else ""
    if node[1]:
        return re.compile(f"[{ranges}{astral}]")
    return re.compile(f"[^{ranges}]|[{astral}]" if bmp else f"[^{ranges}]")


def _text_run(rng: random.Random, node: _Node, length: int, bmp: bool) -> str:
    """`length` characters of a class that admits most text: running prose where it fits, drawn characters
    where the class excludes one."""
    offset = int(rng.random() * 10)
    k = int(rng.random() * len(_TEXT))
    parts: list[str] = []
    size = 0
    while size < offset + length:
        parts.append(_TEXT[k % len(_TEXT)])
        size += len(parts[-1])
        k += 1
    piece = "".join(parts)[offset : offset + length]
    return _excluded(node, bmp).sub(lambda m: _char(rng, node, bmp=True), piece)


def _generate(rng: random.Random, node: _Node, out: list[str], bmp: bool) -> None:
    kind = node[0]
    if kind == "seq":
        for item in node[1]:
            _generate(rng, item, out, bmp)
    elif kind == "alt":
        _generate(rng, node[1][int(rng.random() * len(node[1]))], out, bmp)
    elif kind == "set":
        out.append(_char(rng, node, bmp))
    elif kind == "rep":
        _, inner, lo, hi = node
        text = inner[0] == "set" and inner[1]  # a negated class: text, as long as a sentence or two
        count = _run_length(rng, lo, hi, _RUN_CAP if text else 8)
        # Bounded runs stay in the Basic Multilingual Plane: a bound counts characters, and a column type such
        # as VARCHAR(n) counts UTF-16 units, which an emoji takes two of.
        inner_bmp = bmp or hi is not None
        if text and rng.random() < 0.7:
            out.append(_text_run(rng, inner, count, inner_bmp))
        else:
            for _ in range(count):
                _generate(rng, inner, out, inner_bmp)
    # bol and eol write nothing: the generated text is the whole match


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> tuple[_Node | None, re.Pattern[str] | None]:
    try:
        check = re.compile(pattern)
    except re.error:
        return None, None
    try:
        return _Parser(pattern).parse(), check
    except _Unsupported:
        return None, check


_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def _real_dates(text: str) -> bool:
    for m in _ISO_DATE.finditer(text):
        try:
            datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            return False
    return True


def pattern_string(rng: random.Random, pattern: str) -> str | None:
    """A string that `pattern` matches (Python's `re.search`, as JSON Schema validators check it), in which
    any YYYY-MM-DD is a real date; None when the pattern uses what the generator does not write for."""
    temporal = _temporal_string(rng, pattern)
    if temporal is not None:
        return temporal
    node, check = _compiled(pattern)
    if node is None or check is None:
        return None
    for _ in range(24):
        out: list[str] = []
        try:
            _generate(rng, node, out, bmp=False)
        except _Unsupported:
            return None
        text = "".join(out)
        if check.search(text) and _real_dates(text):
            return text
    return None


# The date and time patterns of Flink's DATE, TIME(p), TIMESTAMP(p) and TIMESTAMP_LTZ(p) answer fields.
_P_DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_P_CLOCK = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"


def _fraction(group: str) -> str:
    return re.escape(r"(\.[0-9]{1,") + rf"(?P<{group}>\d+)" + re.escape("})?")


# Matches the pattern text itself: the date (and time, and zone) the pattern asks for, and the fraction digits.
_TEMPORAL = re.compile(
    rf"\^(?:(?P<date>{re.escape(_P_DATE)})(?P<t>T{re.escape(_P_CLOCK)}(?:{_fraction('p1')})?(?P<z>Z)?)?"
    rf"|(?P<time>{re.escape(_P_CLOCK)})(?:{_fraction('p2')})?)\$"
)
_DAY0 = datetime.date(1900, 1, 1).toordinal()
_DAYS = datetime.date(2100, 12, 31).toordinal() - _DAY0
_EDGE_DATES = ("1970-01-01", "2000-02-29", "2024-02-29", "1999-12-31", "2038-01-19", "1900-01-01", "2100-12-31")


@functools.lru_cache(maxsize=256)
def _temporal(pattern: str) -> tuple[bool, bool, bool, int] | None:
    """(date, time, zone, fraction digits) of a date or time pattern; None for another pattern."""
    m = _TEMPORAL.fullmatch(pattern)
    if m is None:
        return None
    digits = m.group("p1") or m.group("p2")
    return bool(m.group("date")), bool(m.group("t") or m.group("time")), bool(m.group("z")), int(digits or 0)


def _temporal_string(rng: random.Random, pattern: str) -> str | None:
    parsed = _temporal(pattern)
    if parsed is None:
        return None
    has_date, has_time, zone, precision = parsed
    parts = []
    if has_date:
        if rng.random() < 0.15:
            parts.append(_EDGE_DATES[int(rng.random() * len(_EDGE_DATES))])
        else:
            parts.append(datetime.date.fromordinal(_DAY0 + int(rng.random() * (_DAYS + 1))).isoformat())
    if has_time:
        seconds = int(rng.random() * 86400)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if precision and rng.random() < 0.7:
            width = 1 + int(rng.random() * precision)
            clock += "." + "".join(str(int(rng.random() * 10)) for _ in range(width))
        parts.append(clock)
    return "T".join(parts) + ("Z" if zone else "")


# --- values ------------------------------------------------------------------------------------------------------


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if declared is None:
        if "properties" in schema or "additionalProperties" in schema:
            return ["object"]
        if "items" in schema:
            return ["array"]
        return ["string"]
    return list(declared) if isinstance(declared, list) else [declared]


def value_for(rng: random.Random, schema: Mapping[str, Any] | bool, depth: int = 0) -> Any:
    """A value valid for `schema` (the forms a structured-output request carries)."""
    if schema is True or schema == {}:
        return _prose(rng, 0, None)
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        options = list(schema["enum"])
        return options[int(rng.random() * len(options))]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            branches = list(schema[key])
            return value_for(rng, branches[int(rng.random() * len(branches))], depth)
    if schema.get("allOf"):
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            if isinstance(part, Mapping):
                merged.update(part)
        return value_for(rng, merged, depth)
    types = _types(schema)
    kind = types[int(rng.random() * len(types))]
    if kind == "object":
        return _object(rng, schema, depth)
    if kind == "array":
        return _array(rng, schema, depth)
    if kind == "integer":
        return _integer(rng, schema)
    if kind == "number":
        return _number(rng, schema)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(rng, schema)


def _object(rng: random.Random, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    out = {
        name: value_for(rng, sub, depth + 1)
        for name, sub in props.items()
        if name in required or (depth < _MAX_DEPTH and rng.random() < 0.8)
    }
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping) and not props:  # a map: keys of our own choosing
        lo = int(schema.get("minProperties", 0))
        hi = int(schema.get("maxProperties", lo + 3))
        count = lo if depth >= _MAX_DEPTH else lo + int(rng.random() * (min(hi, lo + 3) - lo + 1))
        while len(out) < count:
            key = _MAP_KEYS[int(rng.random() * len(_MAP_KEYS))] if rng.random() < 0.3 else _word(rng)
            if key in out:
                key = f"{key}{len(out)}"
            out[key] = value_for(rng, extra, depth + 1)
    return out


def _array(rng: random.Random, schema: Mapping[str, Any], depth: int) -> list[Any]:
    lo = int(schema.get("minItems", 0))
    hi = schema.get("maxItems")
    top = lo + 3 if hi is None else min(int(hi), lo + 3)
    count = lo if depth >= _MAX_DEPTH else lo + int(rng.random() * (top - lo + 1))
    items = schema.get("items", {"type": "string"})
    return [value_for(rng, items, depth + 1) for _ in range(count)]


def _integer(rng: random.Random, schema: Mapping[str, Any]) -> int:
    lo, hi = _int_bounds(schema)
    r = rng.random()
    if r < _EDGE:
        value = lo
    elif r < 2 * _EDGE:
        value = hi
    elif r < 0.6 and max(lo, -1000) <= min(hi, 1000):
        value = rng.randint(max(lo, -1000), min(hi, 1000))  # most answers are small numbers
    else:
        value = rng.randint(lo, hi)  # exact for any width, BIGINT's 2^63 included
    step = schema.get("multipleOf")
    if isinstance(step, int) and not isinstance(step, bool) and step > 0:
        value -= value % step
        if value < lo:
            value += step
    return value


def _int_bounds(schema: Mapping[str, Any]) -> tuple[int, int]:
    lo: int | None = None
    hi: int | None = None
    if _is_num(schema.get("minimum")):
        lo = math.ceil(schema["minimum"])
    if _is_num(schema.get("exclusiveMinimum")):
        x = schema["exclusiveMinimum"]
        lo = max(lo if lo is not None else x, math.floor(x) + 1)
    if _is_num(schema.get("maximum")):
        hi = math.floor(schema["maximum"])
    if _is_num(schema.get("exclusiveMaximum")):
        x = schema["exclusiveMaximum"]
        hi = min(hi if hi is not None else x, math.ceil(x) - 1)
    if lo is None and hi is None:
        return 0, 1000
    if lo is None:
        assert hi is not None
        return hi - 1000, hi
    if hi is None:
        return lo, lo + 1000
    return lo, max(lo, hi)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _decimal_scale(schema: Mapping[str, Any]) -> tuple[int, int] | None:
    """(integer digits, fraction digits) a DECIMAL(p, s) field's bounds -X..X, X = 10^(p-s) - 10^-s, allow:
    (p - s, s) when X is written out (999.99: DECIMAL(5, 2)); (p - s, 0) when a float could not hold X (a
    bound of 1e+20, or 99999999999999.98 for DECIMAL(16, 2)): integers, which fit whatever s is; None for
    other bounds. (A symmetric float bound of a power of ten reads as such a DECIMAL: its values are valid for
    either reading.)"""
    hi, lo = schema.get("maximum"), schema.get("minimum")
    if not (_is_num(hi) and _is_num(lo)):
        return None
    assert hi is not None and lo is not None
    if lo != -hi or hi <= 0:
        return None
    text = str(hi) if isinstance(hi, int) else repr(hi)
    whole, _, fraction = text.partition(".")
    fraction = "" if fraction == "0" else fraction  # 99999.0: DECIMAL(5, 0) written as a float
    whole = "" if whole == "0" else whole
    if re.fullmatch(r"9*", whole) and re.fullmatch(r"9*", fraction) and whole + fraction:
        return len(whole), len(fraction)
    digits = round(math.log10(hi))
    if isinstance(hi, float) and digits >= 0 and abs(hi - 10.0**digits) <= 10.0**digits * 1e-12:
        # 1.0 is DECIMAL(p, p) for p > 15 (0.999..., at least 16 nines): four fraction digits fit it.
        return (digits, 0) if digits else (0, 4)
    return None


def _number(rng: random.Random, schema: Mapping[str, Any]) -> int | float:
    scale = _decimal_scale(schema)
    if scale is not None:
        return _decimal(rng, *scale)
    bounded = [_is_num(schema.get(k)) for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")]
    if not any(bounded):
        return _free_number(rng)
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    lo = float(lo) if _is_num(lo) else (float(hi) - 1000.0)
    hi = float(hi) if _is_num(hi) else lo + 1000.0
    r = rng.random()
    if r < _EDGE and "minimum" in schema:
        return schema["minimum"]  # type: ignore[no-any-return]
    if r < 2 * _EDGE and "maximum" in schema:
        return schema["maximum"]  # type: ignore[no-any-return]
    for _ in range(16):
        value = round(lo + rng.random() * (hi - lo), 4)
        if (
            (lo < value < hi)
            or (value == lo and "exclusiveMinimum" not in schema)
            or (value == hi and "exclusiveMaximum" not in schema)
        ):
            return value
    return (lo + hi) / 2


def _decimal(rng: random.Random, whole: int, fraction: int) -> int | float:
    """A number of at most `whole` integer and `fraction` fraction digits; at most 15 significant digits, so
    that the float's shortest form (what JSON gets) is that very decimal."""
    r = rng.random()
    if r < 0.05:
        return 0
    if r < 0.05 + _EDGE and whole + fraction <= 15:
        text = ("9" * whole or "0") + ("." + "9" * fraction if fraction else "")
        bound = int(text) if not fraction else float(text)
        return -bound if rng.random() < 0.5 else bound
    int_digits = int(rng.random() * (min(whole, 15) + 1))
    frac_digits = int(rng.random() * (min(fraction, 15 - int_digits) + 1))
    int_part = "".join(str(int(rng.random() * 10)) for _ in range(int_digits)) or "0"
    sign = "-" if rng.random() < 0.3 else ""
    if not frac_digits:
        return int(sign + int_part)
    frac_part = "".join(str(int(rng.random() * 10)) for _ in range(frac_digits))
    value = float(f"{sign}{int_part}.{frac_part}")
    assert Decimal(repr(value)) == Decimal(f"{sign}{int_part}.{frac_part}")
    return value


def _free_number(rng: random.Random) -> int | float:
    # Within what a FLOAT holds (about 1e-38 .. 3.4e38), so that either column type takes any of these.
    r = rng.random()
    if r < 0.1:
        return _ri(rng, -1000, 1000)
    if r < 0.2:
        return float(f"{rng.uniform(1, 10):.3f}e{_ri(rng, -20, 30)}") * (-1 if rng.random() < 0.3 else 1)
    if r < 0.25:
        return 0.0
    return round(rng.uniform(-1000, 1000), _ri(rng, 1, 6))


def _ri(rng: random.Random, a: int, b: int) -> int:
    return a + int(rng.random() * (b - a + 1))


def _word(rng: random.Random) -> str:
    return _WORDS[int(rng.random() * len(_WORDS))]


def _prose(rng: random.Random, lo: int, hi: int | None) -> str:
    length = _run_length(rng, lo, hi)
    start = int(rng.random() * len(_TEXT))
    text = "".join(_TEXT[(start + k) % len(_TEXT)] for k in range(length // 20 + 2))
    out = text[:length]
    if hi is not None:  # a bound counts characters: keep to the Basic Multilingual Plane (see _generate)
        out = "".join(ch if ord(ch) <= 0xFFFF else "*" for ch in out)
    return out


_FORMATS = {
    "date": lambda rng: _temporal_string(rng, "^" + _P_DATE + "$"),
    "date-time": lambda rng: _temporal_string(rng, "^" + _P_DATE + "T" + _P_CLOCK + r"(\.[0-9]{1,3})?Z$"),
    "time": lambda rng: f"{_temporal_string(rng, '^' + _P_CLOCK + '$')}Z",
    "uuid": lambda rng: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
    "email": lambda rng: f"{_word(rng)}.{_word(rng)}@example.com",
    "uri": lambda rng: f"https://example.com/{_word(rng)}/{_ri(rng, 1, 999)}",
}


def _string(rng: random.Random, schema: Mapping[str, Any]) -> str:
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        text = pattern_string(rng, pattern)
        if text is not None:
            return text
    fmt = schema.get("format")
    if fmt in _FORMATS:
        return str(_FORMATS[fmt](rng))
    lo = int(schema.get("minLength", 0))
    hi = schema.get("maxLength")
    return _prose(rng, lo, None if hi is None else int(hi))


# --- answers that ignore the schema ------------------------------------------------------------------------------


def _allowed_types(schema: Any) -> set[str]:
    """The JSON types some value of `schema` has ("number" admits integers; "integer" does not admit 1.5)."""
    every = {"string", "number", "integer", "boolean", "array", "object", "null"}
    if not isinstance(schema, Mapping) or not schema:
        return every
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        return {json_type(v) for v in values}
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return set().union(*(_allowed_types(b) for b in schema[key]))
    if "type" not in schema:
        return every
    return set(_types(schema))


_WRONG: tuple[tuple[str, Any], ...] = (
    ("string", "not what was asked"),
    ("number", 1.5),
    ("boolean", True),
    ("array", ["not", "a", "list"]),
    ("object", {"not": "an object"}),
    ("null", None),
)


def _wrong_value(rng: random.Random, schema: Any) -> Any:
    allowed = _allowed_types(schema)
    candidates = [json.loads(json.dumps(v)) for t, v in _WRONG if t not in allowed]
    if not candidates:
        raise LookupError
    return candidates[int(rng.random() * len(candidates))]


def _max_length(schema: Any) -> int | None:
    """The longest string a string schema admits (its maxLength, or an anchored pattern's bound)."""
    if not isinstance(schema, Mapping):
        return None
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            bounds = [_max_length(b) for b in schema[key] if "string" in _allowed_types(b)]
            known = [b for b in bounds if b is not None]
            return max(known) if known and len(known) == len(bounds) else None
    if "string" not in _types(schema) or "enum" in schema or "const" in schema:
        return None
    if isinstance(schema.get("maxLength"), int):
        return int(schema["maxLength"])
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        node, _ = _compiled(pattern)
        if node is not None and node[0] == "seq" and node[1] and node[1][0] == ("bol",) and node[1][-1] == ("eol",):
            return _node_max(node)
    return None


def _node_max(node: _Node) -> int | None:
    kind = node[0]
    if kind == "seq":
        total = 0
        for item in node[1]:
            size = _node_max(item)
            if size is None:
                return None
            total += size
        return total
    if kind == "alt":
        sizes = [_node_max(b) for b in node[1]]
        return None if None in sizes else max(s for s in sizes if s is not None)
    if kind == "set":
        return 1
    if kind == "rep":
        inner = _node_max(node[1])
        return None if node[3] is None or inner is None else inner * node[3]
    return 0


def break_answer(rng: random.Random, schema: Mapping[str, Any], value: Any) -> tuple[str | None, Any]:
    """`value` (valid for `schema`) made invalid one of the BREAK_WAYS that apply, drawn with `rng`: (the way,
    the broken value); (None, value) when nothing can be wrong (a schema that admits anything)."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    ways: list[str] = []
    if isinstance(value, dict) and isinstance(props, Mapping):
        if any(name in value for name in schema.get("required") or ()):
            ways.append("missing")
        if any(name in value and _can_be_wrong(props[name]) for name in props):
            ways.append("wrong-type")
        if schema.get("additionalProperties") is False:
            ways.append("extra")
        if any(name in value and _max_length(props[name]) is not None for name in props):
            ways.append("too-long")
    elif _can_be_wrong(schema):
        return "wrong-type", _wrong_value(rng, schema)
    if not ways:
        return None, value
    way = ways[int(rng.random() * len(ways))]
    broken = dict(value)
    if way == "missing":
        names = [n for n in schema.get("required") or () if n in broken]
        del broken[names[int(rng.random() * len(names))]]
    elif way == "wrong-type":
        assert isinstance(props, Mapping)
        names = [n for n in props if n in broken and _can_be_wrong(props[n])]
        name = names[int(rng.random() * len(names))]
        broken[name] = _wrong_value(rng, props[name])
    elif way == "extra":
        assert isinstance(props, Mapping)
        name = next(n for n in ("note", "comment", "extra", "remark", "x_extra") if n not in props)
        broken[name] = "a field the schema does not have"
    else:
        assert isinstance(props, Mapping)
        names = [n for n in props if n in broken and _max_length(props[n]) is not None]
        name = names[int(rng.random() * len(names))]
        limit = _max_length(props[name])
        assert limit is not None
        broken[name] = ("too long " * (limit // 9 + 2))[: limit + 1 + int(rng.random() * 5)]
    return way, broken


def _can_be_wrong(schema: Any) -> bool:
    try:
        _wrong_value(random.Random(0), schema)
    except LookupError:
        return False
    return True
