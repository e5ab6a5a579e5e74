"""The JSON rule set: one definition for bodies, contents and extracted values, on every backend and client.

A text is JSON here when it is RFC 8259 JSON that also keeps I-JSON's rules (RFC 7493):
- valid UTF-8 (checked on the bytes of a body; an Arrow string, and so a content, is UTF-8 already),
  with no byte order mark;
- only JSON whitespace (space, tab, LF, CR) around and between tokens;
- no NaN, Infinity or any other literal besides true, false and null;
- no unpaired surrogate escape (`"\\ud800"`) in any string or name, read or not: an Arrow string cannot
  hold one;
- every number within the range of a double: beyond +-1.8e308 is rejected (rounding, and underflow to
  zero, are accepted as in every JSON reader);
- at most DEPTH_LIMIT (64, declared with the native core in native/contract.py) arrays and objects deep.
  libcudf keeps nesting levels in a signed 8-bit integer (at most 127, one of them taken by the array the
  GPU reader joins records into); 64 is far above any vLLM body (~9 with logprobs) or structured output,
  leaves that margin, and keeps Python's recursive json parser far from the caller's stack, so the verdict
  never depends on where it runs.
Duplicate names are accepted, as RFC 8259 allows (I-JSON does not): the last one wins.

Two ways in, which agree by construction:
- `loads(text)`: one text at a time (Python's json with the checks above); a text that breaks a rule raises
  `Rejected` with the reason. The tests' reference path (tests/oracle, its SSE assembler too) reads with it,
  and the native core (dspark_json.cpp, its port) is held to that.
- `screen(records)`: a whole batch, True for records that are one JSON object keeping every rule. simdjson
  (pysimdjson) checks each record's grammar, UTF-8, surrogate escapes, literals and numbers; it accepts a
  byte order mark and any depth up to 1024, so those two are checked beside it (the depth by counting
  brackets, and by `loads`'s depth pattern for the rare records with more than DEPTH_LIMIT of them). It
  refuses what the rules allow in one place only, integers beyond 64 bits. Only screened records go to the
  gpu backend's reader (libcudf); anything else goes to the native core, which decides it.
  Being one object is also what lets records be joined for a batch reader: a record cannot end inside
  another (a GPU batch is one JSON array, where `{"a":[{}` + `{}]}` would otherwise read as one element).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import re2
import simdjson

from connector._json_rules import DEPTH_LIMIT, TOO_DEEP_REASON

__all__ = ["DEPTH_LIMIT", "MAX_BODY_BYTES", "Rejected", "display_path", "loads", "screen"]

# A longer body is not read (docs/json.md): far beyond any response, and reading it would take several times
# its size in memory. The native core refuses it from its length alone, with the same reason.
MAX_BODY_BYTES = 256 << 20
_WS = " \t\n\r"


class Rejected(Exception):
    """A text that cannot become a row: `reason` says why, `field` where (a dotted path) when known."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason if field is None else f"{field}: {reason}")
        self.reason = reason
        self.field = field


def display_path(path: Sequence[str | int]) -> str | None:
    """`choices[0].message.content` for ["choices", 0, "message", "content"]; None for the top level."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or None


# -- the reference: one text ---------------------------------------------------------------------------------


class _NotANumber(ValueError):
    pass


class _OutOfRange(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _NotANumber(name)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _OutOfRange(text)
    return value


def _int(text: str) -> int:
    # More than 309 digits is beyond any double; checking first also keeps int() from Python's 4,300-digit
    # limit, which raises ValueError instead of a JSON error.
    if len(text) - text.startswith("-") > 309:
        raise _OutOfRange(text)
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise _OutOfRange(text) from None
    return value


_decoder = json.JSONDecoder(parse_float=_float, parse_int=_int, parse_constant=_constant)

# Depth at most DEPTH_LIMIT, counting brackets outside strings as json does up to its first error (an
# unterminated string or array at the end counts as far as it goes). RE2: linear in the text.
_LOOSE_STRING = r'"(?:[^"\\]|\\.)*(?:"|$)'


def _level(depth: int) -> str:
    inner = f"|{_level(depth - 1)}" if depth > 1 else ""
    return rf"[\[{{](?:[^\[\]{{}}\"]|{_LOOSE_STRING}{inner})*(?:[\]}}]|$)"


_SHALLOW = re2.compile(rf"(?s)(?:[^\[{{\"]|{_LOOSE_STRING}|{_level(DEPTH_LIMIT)})*")


def _truncated_token(text: str, pos: int) -> bool:
    """Whether the token json stopped at is cut by the end of the input (`tr`, `nu`, `-`, `1.`, `1e+`, `\\u12`)."""
    tail = text[pos:]
    if tail and any(literal.startswith(tail) for literal in ("true", "false", "null")):
        return True
    start = pos
    while start > 0 and text[start - 1] in "0123456789+-.eE":
        start -= 1
    number = text[start:]
    if number and _NUMBER_PREFIX.fullmatch(number) is not None:
        return True
    # json points at the `u` of an escape it could not read.
    return tail.startswith("u") and text[pos - 1 : pos] == "\\" and len(tail) < 5 and _is_hex(tail[1:])


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)


_NUMBER_PREFIX = re2.compile(r"-|-?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][-+]?[0-9]*)?")


def loads(text: str) -> Any:
    """The JSON value of `text` under the rules above, or `Rejected` saying which rule it breaks and where.

    "empty" for a text of JSON whitespace only (callers say what was empty).
    """
    if not text.strip(_WS):
        raise Rejected("empty")
    if text.count("[") + text.count("{") > DEPTH_LIMIT and _SHALLOW.fullmatch(text) is None:
        raise Rejected(TOO_DEEP_REASON)
    if text.startswith("\ufeff"):
        raise Rejected("not JSON: a byte order mark (U+FEFF) at char 0")
    try:
        value = _decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise Rejected(_syntax_reason(text, exc)) from None
    except _NotANumber as exc:
        raise Rejected(f"not JSON: {exc} (JSON has no NaN or Infinity)") from None
    except _OutOfRange as exc:
        number = str(exc)
        shown = number if len(number) <= 24 else f"{number[:20]}... ({len(number)} characters)"
        raise Rejected(f"number out of range for a double: {shown}") from None
    if "\\ud" in text or "\\uD" in text:
        _check_strings(value, [])
    return value


def _syntax_reason(text: str, exc: json.JSONDecodeError) -> str:
    if exc.msg == "Extra data":
        return f"trailing data after the JSON value at char {exc.pos}"
    if exc.pos >= len(text) or exc.msg.startswith("Unterminated string") or _truncated_token(text, exc.pos):
        return f"truncated JSON: input ends at char {len(text)} ({exc.msg.removesuffix(' at')})"
    return f"not JSON: {exc.msg.removesuffix(' at')} at char {exc.pos}"


def _check_strings(value: Any, path: list[str | int]) -> None:
    """Rejected at the first string or name (in document order) that holds an unpaired surrogate."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise Rejected("invalid string: unpaired surrogate escape", display_path(path)) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key, path)
            _check_strings(item, [*path, key])
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_strings(item, [*path, i])


# -- the screen: a batch -------------------------------------------------------------------------------------


def screen(records: pa.Array, items: Sequence[bytes | str | None] | None = None) -> np.ndarray:
    """A boolean mask: the records (binary or string, nulls False) that are one JSON object keeping every rule.

    `items`: the same records as Python bytes or str, when the caller has them (else they are made here).
    simdjson checks the grammar, UTF-8 (the whole text, names and values no column reads included),
    surrogate escapes, literals and numbers (it refuses those beyond a double, and integers beyond 64 bits,
    which the native core then decides); what it does not check, a byte order mark and the depth, is checked here.
    """
    n = len(records)
    if n == 0:
        return np.zeros(0, dtype=bool)
    if items is None:
        items = records.to_numpy(zero_copy_only=False).tolist()
    parse = simdjson.Parser().parse
    passed = []
    for item in items:
        try:  # a body over the size limit is left to the native core, which refuses it unread
            passed.append(item is not None and len(item) <= MAX_BODY_BYTES and type(parse(item)) is simdjson.Object)
        except Exception:  # any refusal leaves the record to the native core, which says why
            passed.append(False)
    mask = np.array(passed, dtype=bool)
    if not mask.any():
        return mask
    starts, ends, data = _spans(records)
    # A byte order mark is the one thing before the object that simdjson skips.
    opened = starts < ends
    mask[opened] &= data[starts[opened]] != 0xEF
    # Depth: a record with at most DEPTH_LIMIT brackets in all is within it. The rare others are measured
    # by `_SHALLOW`.
    brackets = _brackets(data)
    counts = np.searchsorted(brackets, ends) - np.searchsorted(brackets, starts)
    for i in np.flatnonzero(mask & (counts > DEPTH_LIMIT)).tolist():
        item = items[i]
        assert item is not None  # simdjson took it
        text = item if isinstance(item, str) else item.decode("utf-8")
        mask[i] = _SHALLOW.fullmatch(text) is not None
    return mask


def _brackets(data: np.ndarray, block: int = 1 << 18) -> np.ndarray:
    """Where the bytes '[' (0x5b) and '{' (0x7b) are in `data`: the bytes b with b | 0x20 == 0x7b.

    A block at a time, so that the temporaries stay in the cache (a third faster than whole arrays).
    """
    found = []
    scratch = np.empty(min(block, len(data)), np.uint8)
    hits = np.empty(len(scratch), bool)
    for start in range(0, len(data), block):
        chunk = data[start : start + block]
        k = len(chunk)
        np.bitwise_or(chunk, 0x20, out=scratch[:k])
        np.equal(scratch[:k], 0x7B, out=hits[:k])
        found.append(np.flatnonzero(hits[:k]) + start)
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _spans(records: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each record of a binary or string array starts and ends in its data, and the data as bytes."""
    wide = pa.types.is_large_binary(records.type) or pa.types.is_large_string(records.type)
    _, offsets_buffer, data_buffer = records.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int64 if wide else np.int32)
    offsets = offsets[records.offset : records.offset + len(records) + 1]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64), data
