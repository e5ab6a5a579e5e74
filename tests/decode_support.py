"""What the parser's tests share (not a test module): the reference the backends are held to, the fuzzer's
mutation, and JSONTestSuite's files and the ways a file is put into a body.

Test modules import from here, never from one another.
"""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from connector.parse import parse_batch
from connector.parse.batch import ERRORS_SCHEMA
from connector.profiles import load_profile
from connector.types.columns import body_columns, output_schema
from tests.oracle.content import content_values
from tests.oracle.exact import Rejected, decode_body

PROFILES = Path(__file__).parent / "data" / "profiles"


def parse(bodies: list[bytes], profile: str = "openai", backend: str = "cpu", **kw: Any):
    result = parse_batch(bodies, profile=profile, backend=backend, **kw)
    result.table.validate(full=True)
    result.errors.validate(full=True)
    assert result.table.schema == output_schema(load_profile(profile))
    assert result.errors.schema == ERRORS_SCHEMA
    # Every body is accounted for exactly once.
    lines = sorted(result.table.column("line").to_pylist() + result.errors.column("line").to_pylist())
    first = kw.get("first_line", 1)
    assert lines == list(range(first, first + len(bodies)))
    return result


def reference(bodies: list[bytes], profile: str) -> list[dict[str, Any] | tuple[str, str | None]]:
    """What the exact path alone makes of each body: a row dict, or the rejection's (reason, field)."""
    prof = load_profile(profile)
    columns = body_columns(prof)
    out: list[dict[str, Any] | tuple[str, str | None]] = []
    for i, raw in enumerate(bodies):
        try:
            row = {"line": i + 1, **decode_body(raw, columns, prof.created_unit)}
        except Rejected as exc:
            out.append((exc.reason, exc.field))
            continue
        if row["created"] is not None:
            row["created"] = datetime.fromtimestamp(row["created"] / 1000, UTC)
        if prof.content_properties:
            values, error = content_values(row["content"], prof.content_properties)
            row.update(values)
            row["content_error"] = error
        out.append(row)
    return out


def assert_matches_reference(bodies: list[bytes], profile: str, backend: str):
    result = parse(bodies, profile, backend)
    rows = {r["line"]: r for r in result.table.to_pylist()}
    errors = {e["line"]: (e["reason"], e["field"]) for e in result.errors.to_pylist()}
    for i, expected in enumerate(reference(bodies, profile), start=1):
        if isinstance(expected, tuple):
            assert errors.get(i) == expected, f"line {i}"
        else:
            assert rows.get(i) == expected, f"line {i}"
    return result


# Things hostile or broken servers and models send, spliced in at random places.
TOKENS = [
    b"NaN",
    b"-Infinity",
    b"Inf",
    b"1e400",
    b"9" * 400,
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\x00",
    b"\x0c",
    b"\xc2\xa0",
    b"\xef\xbb\xbf",
    b"[" * 70,
    b"]" * 70,
    b"{}",
    b"}",
    b"]",
    b",",
    b":",
    b'"',
    b"\\",
    b"\n",
    b"\r\n",
    b"true",
    b"nul",
    b"-",
    b"0.",
    b"1e",
    b'{"error":{"message":"x"}}',
    b'"object":"error",',
    b'"created":"now",',
    b'"choices":{},',
    b"```json\n",
]


def mutate(body: bytes, rng: random.Random) -> bytes:
    data = bytearray(body)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        at = rng.randrange(len(data) + 1)
        kind = rng.randrange(6)
        if kind == 0 and data:  # flip a byte
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:  # delete a span
            del data[at : at + rng.randrange(1, 12)]
        elif kind == 2:  # insert a token
            data[at:at] = rng.choice(TOKENS)
        elif kind == 3:  # truncate (a cut connection)
            del data[at:]
        elif kind == 4:  # duplicate a span
            start = rng.randrange(len(data) + 1)
            data[at:at] = data[start : start + rng.randrange(1, 40)]
        else:  # replace a printable ASCII byte with another structural one
            if data:
                data[min(at, len(data) - 1)] = rng.choice(b'{}[]",:\\ 0-e')
    return bytes(data)


# -- JSONTestSuite's files


def _suite() -> Path | None:
    given = os.environ.get("DSPARK_JSONTESTSUITE")
    if given:
        return Path(given)
    root = Path(__file__).resolve().parent.parent
    for folder in [root, *root.parents]:
        candidate = folder / "shared" / "data" / "JSONTestSuite"
        if candidate.is_dir():
            return candidate
    return None


SUITE = _suite()
FILES: list[Path] = sorted((SUITE / "test_parsing").glob("*.json")) if SUITE else []


def _string(data: bytes) -> bytes:
    """`data` as a JSON string: quotes, backslashes and control bytes escaped, other bytes as they are (so a
    file that is not UTF-8 makes a body that is not UTF-8)."""
    out = bytearray(b'"')
    for byte in data:
        if byte in (0x22, 0x5C) or byte < 0x20:
            out += b"\\u%04x" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


def whole(data: bytes) -> bytes:
    return data


def as_content(data: bytes) -> bytes:
    return b'{"id":"t","object":"chat.completion","choices":[{"index":0,"message":{"content":' + _string(data) + b"}}]}"


def in_unread_field(data: bytes) -> bytes:
    return b'{"id":"t","created":1732950000,"x":' + data + b',"model":"m"}'


def in_read_field(data: bytes) -> bytes:
    return b'{"id":"t","metadata":' + data + b',"model":"m"}'


WAYS = {"whole": whole, "content": as_content, "unread field": in_unread_field, "read field": in_read_field}
