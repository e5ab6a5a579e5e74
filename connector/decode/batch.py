"""parse_batch: raw response bodies -> typed rows + error rows, whichever backend reads the JSON.

    >>> from connector.decode import parse_batch
    >>> body = b'{"id":"c1","object":"chat.completion","created":1732950000,"model":"m","choices":[]}'
    >>> result = parse_batch([body, b"not json"], profile="openai", backend="cpu")
    >>> result.table.column("created")[0].as_py().isoformat(), result.errors.column("reason")[0].as_py()
    ('2024-11-30T07:00:00+00:00', 'not JSON: Expecting value at char 0')

The way of a batch: the JSON screen (`strict.screen`) picks the bodies that are one JSON object within the
rules. The cpu backend decodes those into structs made for the columns and builds the columns from them
(`typed`); the gpu backend reads them together (`readers`), isolates the records it refuses (`isolate`) and
flattens the nested result with pyarrow.compute (`flatten`). Everything else goes through the exact path
(`exact`), which gives a row or says why not. Then the contents are parsed a second time (`content`). All
rows come back in input order.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from connector.decode.content import parse_contents
from connector.decode.exact import Rejected, decode_body
from connector.decode.flatten import flatten
from connector.decode.isolate import joined, read_isolating
from connector.decode.readers import CpuReader, Reader, ReadFailed, select_reader
from connector.decode.strict import screen
from connector.decode.typed import BodyReader, ContentReader
from connector.profiles import Profile, load_profile
from connector.schema.columns import Column, body_columns, output_schema, read_schema

__all__ = ["ERRORS_SCHEMA", "ParseResult", "parse_batch"]

log = logging.getLogger(__name__)

ERRORS_SCHEMA = pa.schema(
    [
        pa.field("line", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("field", pa.string()),
        pa.field("body", pa.binary()),
    ]
)


@dataclass
class ParseResult:
    """Rows parsed from a batch, and one error row for every body that could not be parsed.

    `table` has the schema `connector.schema.columns.output_schema(profile)` (first column `line`: the
    1-based position of the body in the input, counted from `first_line`). `errors` has `ERRORS_SCHEMA`:
    line, reason, field (null when not about one field) and body (the raw bytes). `backend` is the
    backend that read the batch ("cpu" or "gpu"); `fallback_reason` says why "auto" did not use the GPU.
    `stats`: bodies, bytes, rows, rejected, exact (bodies the exact path decided), content_exact, reads
    (batch reads of the gpu backend, isolation included), seconds, and where the seconds went: screen_s
    (the JSON screen of `strict`), read_s (decoding the bodies: msgspec on cpu, the batch reads on gpu),
    flatten_s (the columns made from what was read), exact_s (bodies on the exact path), content_s (the
    second parse, on both paths).
    """

    table: pa.Table
    errors: pa.Table
    backend: str
    fallback_reason: str | None = None
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Plan:
    columns: tuple[Column, ...]
    read_schema: pa.Schema
    body_schema: pa.Schema
    output_schema: pa.Schema
    # For fields that are an integer or a string (stop_reason): the schema that reads them as integers, the
    # reader's words when a batch holds such integers, and a byte pattern that finds the bodies that do.
    int_read_schema: pa.Schema
    int_markers: tuple[str, ...]
    int_probe: re.Pattern[bytes] | None
    body_reader: BodyReader
    content_reader: ContentReader


_plans: dict[int, tuple[Profile, _Plan]] = {}


def _plan(profile: Profile) -> _Plan:
    cached = _plans.get(id(profile))
    if cached is not None and cached[0] is profile:
        return cached[1]
    columns = body_columns(profile)
    out = output_schema(profile)
    mixed = sorted({p[-1] for c in columns if c.kind == "any" for p in c.paths})
    plan = _Plan(
        columns=columns,
        read_schema=read_schema(columns, profile.created_unit),
        body_schema=pa.schema(list(out)[: 1 + len(columns)]),
        output_schema=out,
        int_read_schema=read_schema(columns, profile.created_unit, mixed_as=pa.int64()),
        int_markers=tuple(f"/{name}) changed from string to number" for name in mixed),
        int_probe=re.compile(rb'"(?:%s)"\s*:\s*-?\d' % b"|".join(re.escape(n.encode()) for n in mixed))
        if mixed
        else None,
        body_reader=BodyReader(columns, profile.created_unit),
        content_reader=ContentReader(profile.content_properties),
    )
    if len(_plans) > 64:
        _plans.clear()
    _plans[id(profile)] = (profile, plan)
    return plan


def _as_bytes(body: Any) -> bytes | None:
    """A body's bytes, or None for something that is not a body (None, a number...)."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        # surrogatepass keeps unpaired surrogates as (invalid) bytes, so they are rejected like any bad UTF-8.
        return body.encode("utf-8", "surrogatepass")
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    return None


def _as_array(raw: list[bytes]) -> tuple[pa.Array, int]:
    """The bodies as one binary array over one joined buffer, and their size in bytes."""
    lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)])
    size = int(offsets[-1])
    kind, width = (pa.binary(), np.int32) if size < 2**31 else (pa.large_binary(), np.int64)
    data = pa.py_buffer(b"".join(raw))
    return pa.Array.from_buffers(kind, len(raw), [None, pa.py_buffer(offsets.astype(width)), data]), size


def _read_bodies(
    reader: Reader, records: list[bytes], index: np.ndarray, plan: _Plan
) -> tuple[list[pa.Table], np.ndarray, int]:
    """Tables of the records the reader took, the input positions of their rows (in table order), reads made.

    A batch whose integer-or-string fields (stop_reason) hold integers is read in two groups, one per type,
    instead of isolating each such body: servers that stop on token ids send them often.
    """
    groups = [(index, records, plan.read_schema)]
    reads = 0
    failed = None
    if plan.int_probe is not None and records:
        reads += 1
        try:
            whole = reader.read(joined(records, reader.separator)(0, len(records)), plan.read_schema)
        except ReadFailed as exc:
            failed = exc
            if any(marker in str(exc) for marker in plan.int_markers):
                failed = None
                ints = np.array([plan.int_probe.search(r) is not None for r in records], dtype=bool)
                groups = [
                    (index[~ints], [r for r, i in zip(records, ints, strict=True) if not i], plan.read_schema),
                    (index[ints], [r for r, i in zip(records, ints, strict=True) if i], plan.int_read_schema),
                ]
        else:
            if whole.num_rows == len(records):
                return [whole], index, reads
    tables: list[pa.Table] = []
    positions: list[np.ndarray] = []
    for group_index, group, schema in groups:
        isolated = read_isolating(
            reader, len(group), joined(group, reader.separator), schema, failed=failed if len(groups) == 1 else None
        )
        tables += [t if schema is plan.read_schema else t.cast(plan.read_schema) for t in isolated.tables]
        positions.append(group_index[np.array(isolated.good, dtype=np.int64)])
        reads += isolated.reads
    return tables, np.concatenate(positions), reads


def parse_batch(
    bodies: Sequence[bytes | str],
    profile: Profile | str = "openai",
    backend: str = "auto",
    first_line: int = 1,
) -> ParseResult:
    """Parse raw response bodies into typed rows; every body gives a row or an error row.

    `profile`: a `Profile`, a built-in profile name or a profile file path. `backend`: "cpu", "gpu" or
    "auto" (the GPU when pylibcudf and a GPU are there, else the CPU, with one WARNING log saying why).
    """
    started = time.perf_counter()
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    plan = _plan(profile)
    reader, fallback_reason = select_reader(backend)
    given = [b if type(b) is bytes else _as_bytes(b) for b in bodies]
    not_bodies = [i for i, b in enumerate(given) if b is None]
    raw = [b"" if b is None else b for b in given]

    # Only records that pass the JSON screen go to the reader (`strict`): one object each, within the rules.
    # The rest (also truncated bodies, which would cost a failed read) are decided on the exact path.
    screen_started = time.perf_counter()
    array, size = _as_array(raw)
    passed = screen(array, raw)
    if not_bodies:
        passed[not_bodies] = False
    candidates = np.flatnonzero(passed)
    read_started = time.perf_counter()
    records = raw if len(candidates) == len(raw) else [raw[i] for i in candidates.tolist()]
    if isinstance(reader, CpuReader):
        roots, taken = plan.body_reader.decode(records)
        reads = 0
        flatten_started = time.perf_counter()
        values, needs_exact = plan.body_reader.columns(roots)
        good = candidates[taken]
    else:
        tables, good, reads = _read_bodies(reader, records, candidates, plan)
        parsed = pa.concat_tables(tables).combine_chunks() if tables else plan.read_schema.empty_table()
        flatten_started = time.perf_counter()
        values, needs_exact = flatten(parsed, plan.columns, profile.created_unit)
    keep = ~needs_exact
    fast_index = good[keep]
    fast_columns = [values[c.name] if keep.all() else values[c.name].filter(pa.array(keep)) for c in plan.columns]

    exact_started = time.perf_counter()
    exact_index = np.setdiff1d(np.arange(len(raw)), fast_index, assume_unique=True)
    exact_rows: list[dict[str, Any]] = []
    exact_lines: list[int] = []
    errors: dict[str, list[Any]] = {"line": [], "reason": [], "field": [], "body": []}
    for i in exact_index.tolist():
        try:
            if given[i] is None:
                raise Rejected(f"not a body: got {type(bodies[i]).__name__} (give bytes or str)")
            exact_rows.append(decode_body(raw[i], plan.columns, profile.created_unit))
            exact_lines.append(i)
        except Rejected as exc:
            errors["line"].append(first_line + i)
            errors["reason"].append(exc.reason)
            errors["field"].append(exc.field)
            errors["body"].append(given[i])
        except Exception as exc:  # a defect of ours must cost this body, not its batch or the job
            log.exception("body at line %d could not be decoded", first_line + i)
            errors["line"].append(first_line + i)
            errors["reason"].append(f"internal error ({type(exc).__name__}); please report it with this body")
            errors["field"].append(None)
            errors["body"].append(given[i])

    exact_columns = [
        pa.array([row[c.name] for row in exact_rows], type=plan.body_schema.field(c.name).type) for c in plan.columns
    ]
    positions = np.concatenate([fast_index, np.array(exact_lines, dtype=np.int64)])
    order = np.argsort(positions, kind="stable")
    line = pa.array(positions[order] + first_line, pa.int64())
    body_arrays = [pa.concat_arrays([f, e]) if len(e) else f for f, e in zip(fast_columns, exact_columns, strict=True)]
    if not np.array_equal(order, np.arange(len(order))):  # most batches are in order already: no copy then
        indices = pa.array(order)
        body_arrays = [a.take(indices) for a in body_arrays]
    arrays = [line, *body_arrays]

    content_exact = 0
    content_started = time.perf_counter()
    if profile.content_properties:
        content = body_arrays[[c.name for c in plan.columns].index("content")]
        content_columns, content_error, content_exact = parse_contents(
            content, profile.content_properties, plan.content_reader if isinstance(reader, CpuReader) else reader
        )
        arrays += [content_columns[p.name] for p in profile.content_properties]
        arrays.append(content_error)

    table = pa.Table.from_arrays(arrays, schema=plan.output_schema)
    error_table = pa.Table.from_pydict(errors, schema=ERRORS_SCHEMA)
    done = time.perf_counter()
    stats = {
        "bodies": float(len(raw)),
        "bytes": float(size),
        "rows": float(table.num_rows),
        "rejected": float(error_table.num_rows),
        "exact": float(len(exact_index)),
        "content_exact": float(content_exact),
        "reads": float(reads),
        "seconds": done - started,
        "screen_s": read_started - screen_started,
        "read_s": flatten_started - read_started,
        "flatten_s": exact_started - flatten_started,
        "exact_s": content_started - exact_started,
        "content_s": done - content_started,
    }
    return ParseResult(table, error_table, reader.name, fallback_reason, stats)
