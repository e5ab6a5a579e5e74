"""parse_batch: raw response bodies -> typed rows + error rows, whichever backend reads the JSON.

    >>> from connector.parse import parse_batch
    >>> body = b'{"id":"c1","object":"chat.completion","created":1732950000,"model":"m","choices":[]}'
    >>> result = parse_batch([body, b"not json"], profile="openai", backend="cpu")
    >>> result.table.column("created")[0].as_py().isoformat(), result.errors.column("reason")[0].as_py()
    ('2024-11-30T07:00:00+00:00', 'not JSON: Expecting value at char 0')
    >>> parse_batch([body], profile="openai", columns=["model", "created"]).table.column_names
    ['line', 'model', 'created']

The way of a batch: a backend (`connector.parse.backends`: the native core on cpu; libcudf on gpu, with
the native core for what libcudf leaves) decides every body, a row with its contents or an error row; what
is not a body (None, a number) is an error row written here. All rows come back in input order.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from connector.parse.backends import REPORT, Backend, Bodies, select_backend
from connector.parse.plan import Plan, plan_for
from connector.profiles import Profile, load_profile
from connector.strict import MAX_BODY_BYTES

__all__ = ["ERRORS_SCHEMA", "INLINE_ERROR_FIELDS", "PHASES", "ParseResult", "parse_batch"]

ERRORS_SCHEMA = pa.schema(
    [
        pa.field("line", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("field", pa.string()),
        pa.field("body", pa.binary()),
    ]
)
# Where a batch's seconds go, by stage (`ParseResult.stats`).
PHASES = ("screen_s", "read_s", "flatten_s", "content_s", "core_s")
_NO_ERRORS = pa.Table.from_arrays([pa.nulls(0, f.type) for f in ERRORS_SCHEMA], schema=ERRORS_SCHEMA)


@dataclass
class ParseResult:
    """Rows parsed from a batch, and one error row for every body that could not be parsed.

    `table` has the schema `connector.types.columns.output_schema(profile)`, or its `line` and the
    `columns` asked for (first column `line`: the 1-based position of the body in the input, counted from
    `first_line`); with `inline_errors`, every body's row in input order, error rows included (their columns
    null) and two more columns, `INLINE_ERROR_FIELDS` (null on parsed rows). `errors` has `ERRORS_SCHEMA`:
    line, reason, field (null when not about one field) and body (the raw bytes; null for what is not a body
    and for a body over `MAX_BODY_BYTES`, which is not read). `backend` is the
    backend that read the batch ("cpu" or "gpu"); `fallback_reason` says why "auto" did not use the GPU.
    `stats`: bodies, bytes, rows, rejected, core (gpu: bodies libcudf left to the native core, whole:
    those it did not read, and those whose values or content it did not decide; 0 on cpu, where the core
    reads every body), content_core (of those, the bodies handed over only for their content), reads (batch
    reads of the gpu backend, isolation and contents included), seconds, and where the seconds went
    (`PHASES`): screen_s (the gpu backend's JSON screen), read_s (the backend's read: the native core's one
    pass on cpu, which also reads the contents; the batch reads on gpu), flatten_s (gpu: the columns made
    from what was read), content_s (gpu: its content reads), core_s (gpu: the native core's call on what
    libcudf left). A batch over `PART_BYTES` is parsed in parts (Arrow string columns stop at 2 GiB): its
    tables have a chunk a part, its stats are the parts' summed.
    """

    table: pa.Table
    errors: pa.Table
    backend: str
    fallback_reason: str | None = None
    stats: dict[str, float] = field(default_factory=dict)


INLINE_ERROR_FIELDS = (pa.field("error_reason", pa.string()), pa.field("error_field", pa.string()))


def _int64s(values: np.ndarray) -> pa.Array:
    """An int64 array of a contiguous numpy array, without pa.array: that imports pandas (a tenth of a second
    of the command line's start) to ask whether its argument is a pandas object."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


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


def _given(bodies: Sequence[Any]) -> tuple[list[bytes], list[int]]:
    """The bodies as bytes (b"" for what is not a body: None, a number...), and the positions of those that
    are not. A list of bytes, the common case, is taken as it is (a tenth of the Python time of a batch went
    to copying it)."""
    if type(bodies) is list and set(map(type, bodies)) <= {bytes}:
        return bodies, []
    given = [b if type(b) is bytes else _as_bytes(b) for b in bodies]
    return [b"" if b is None else b for b in given], [i for i, b in enumerate(given) if b is None]


def _offsets(raw: list[bytes]) -> np.ndarray:
    """Where each body starts in the bodies joined (int64, len(raw) + 1; the last one: their bytes)."""
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)), out=offsets[1:])
    return offsets


def _joined(raw: list[bytes], not_bodies: Sequence[int] | np.ndarray, offsets: np.ndarray) -> Bodies:
    return Bodies(raw, pa.py_buffer(b"".join(raw)), offsets, np.asarray(not_bodies, dtype=np.int64))


# A batch is parsed in parts of at most PART_BYTES (contiguous runs of bodies; a larger body is a part
# alone), each counted as its bodies' bytes and PART_BODY_BYTES a body. Why: an Arrow string column has
# 32-bit offsets (2 GiB), and every output string column holds at most about the bytes of the bodies it
# comes from (a value is a piece of its body; JSON escapes only shrink), plus at most a short text a body
# (an error's reason or field: tens of bytes, a few hundred at most). A part's columns then stay far
# from 2 GiB, never need Arrow's 64-bit offsets, and the parts' tables are the chunks of one table (no
# copy). A batch of 10,000 bodies of 10 KB is a tenth of a part: most batches are one part.
PART_BYTES = 1 << 30
_LINE_MAX = 2**63 - 1  # the `line` column is int64
PART_BODY_BYTES = 1 << 10


def parse_batch(
    bodies: Sequence[bytes | str],
    profile: Profile | str = "openai",
    backend: str | Backend = "auto",
    first_line: int = 1,
    columns: Sequence[str] | None = None,
    inline_errors: bool = False,
) -> ParseResult:
    """Parse raw response bodies into typed rows; every body gives a row or an error row.

    `profile`: a `Profile`, a built-in profile name or a profile file path. `backend`: "cpu", "gpu",
    "auto" (the GPU when pylibcudf and a GPU are there, else the CPU, with one WARNING log saying why), or a
    backend object (`connector.parse.backends`). `columns`: the output columns to build (all of the
    profile's when None); only those are read, and a body is held only to the types of those (the JSON
    rules hold for the whole text whatever is read). `inline_errors`: the table holds every body's row in
    input order, error rows included (see `ParseResult`).
    """
    started = time.perf_counter()
    if not isinstance(profile, Profile):
        profile = load_profile(profile)
    plan = plan_for(profile, columns)
    chosen, fallback_reason = select_backend(backend)
    raw, not_bodies = _given(bodies)
    offsets = _offsets(raw)
    n = len(raw)
    if not 0 <= first_line <= _LINE_MAX - n + 1:
        raise ValueError(f"first_line {first_line}: the lines of {n} bodies from it must fit in an int64, from 0")
    if n > 1 and offsets[-1] + PART_BODY_BYTES * n > PART_BYTES:
        parts = _in_parts(bodies, raw, not_bodies, offsets, plan, chosen, first_line, inline_errors)
        stats = {key: sum(r.stats[key] for r in parts) for key in parts[0].stats}
        stats["seconds"] = time.perf_counter() - started
        errors = [r.errors for r in parts if r.errors.num_rows] or [_NO_ERRORS]
        table = pa.concat_tables([r.table for r in parts])
        return ParseResult(table, pa.concat_tables(errors), chosen.name, fallback_reason, stats)
    batch = _joined(raw, not_bodies, offsets)
    return _parse(batch, bodies, 0, plan, chosen, fallback_reason, first_line, inline_errors, started)


def _in_parts(
    bodies: Sequence[Any],
    raw: list[bytes],
    not_bodies: list[int],
    offsets: np.ndarray,
    plan: Plan,
    chosen: Backend,
    first_line: int,
    inline_errors: bool,
) -> list[ParseResult]:
    """The results of the parts of a batch over `PART_BYTES`, in input order (`parse_batch` makes them one:
    the parts' tables are the chunks of its tables, their stats summed)."""
    n = len(raw)
    weights = offsets + PART_BODY_BYTES * np.arange(n + 1, dtype=np.int64)
    cuts = [0]
    while cuts[-1] < n:
        start = cuts[-1]
        end = int(np.searchsorted(weights, weights[start] + PART_BYTES, side="right")) - 1
        cuts.append(max(end, start + 1))
    given = np.asarray(not_bodies, dtype=np.int64)
    results = []
    for start, end in itertools.pairwise(cuts):
        part = _joined(
            raw[start:end], given[(given >= start) & (given < end)] - start, offsets[start : end + 1] - offsets[start]
        )
        results.append(
            _parse(part, bodies, start, plan, chosen, None, first_line + start, inline_errors, time.perf_counter())
        )
        del part  # its joined bytes, before the next part's
    return results


def _parse(
    batch: Bodies,
    bodies: Sequence[Any],
    start: int,
    plan: Plan,
    chosen: Backend,
    fallback_reason: str | None,
    first_line: int,
    inline_errors: bool,
    started: float,
) -> ParseResult:
    """`parse_batch` of `batch`, the bodies `bodies[start:start + n]` (one part, or the whole batch)."""
    n = len(batch.raw)
    not_bodies = set(batch.not_bodies.tolist())

    def given(i: int) -> bytes | None:
        """Body `i` as given, for its error row (None for what is not a body, and for a body too large to be
        read: an error row does not carry hundreds of megabytes)."""
        return None if i in not_bodies or len(batch.raw[i]) > MAX_BODY_BYTES else batch.raw[i]

    read = chosen.read_bodies(batch, plan)

    errors: dict[str, list[Any]] = {
        "line": [first_line + i for i in read.rejected.tolist()],
        "reason": list(read.reasons),
        "field": list(read.fields),
        "body": [given(i) for i in read.rejected.tolist()],
    }
    # What the backend did not decide: what is not a body, and (a defect of ours) a body it gave no verdict.
    undecided = np.setdiff1d(np.arange(n), np.concatenate([read.positions, read.rejected]), assume_unique=True)
    if len(undecided):
        for i in undecided.tolist():
            errors["line"].append(first_line + i)
            if i in not_bodies:
                errors["reason"].append(f"not a body: got {type(bodies[start + i]).__name__} (give bytes or str)")
            else:
                errors["reason"].append(
                    f"internal error (the {chosen.name} backend gave no verdict for this body); {REPORT}"
                )
            errors["field"].append(None)
            errors["body"].append(given(i))
        merged = sorted(
            zip(errors["line"], errors["reason"], errors["field"], errors["body"], strict=True), key=lambda e: e[0]
        )
        errors = {key: [e[k] for e in merged] for k, key in enumerate(("line", "reason", "field", "body"))}

    order = np.argsort(read.positions, kind="stable")
    in_order = np.array_equal(order, np.arange(len(order)))  # most batches are: no copy then
    indices = None if in_order else pa.array(order)

    def ordered(array: pa.Array) -> pa.Array:
        return array if indices is None else array.take(indices)

    arrays = {c.name: ordered(read.columns[c.name]) for c in plan.columns}
    if plan.properties:
        assert read.content is not None and read.content_errors is not None
        for p in plan.properties:
            arrays[p.name] = ordered(read.content[p.name])
        arrays["content_error"] = ordered(read.content_errors)

    lines = np.ascontiguousarray(read.positions[order] + first_line, dtype=np.int64)
    table = pa.Table.from_arrays([_int64s(lines), *(arrays[name] for name in plan.names)], schema=plan.output_schema)
    error_table = pa.Table.from_pydict(errors, schema=ERRORS_SCHEMA) if errors["line"] else _NO_ERRORS
    if inline_errors:
        table = _inline(table, error_table, n, first_line)
    stats = {
        "bodies": float(n),
        "bytes": float(batch.offsets[-1]),
        "rows": float(len(lines)),
        "rejected": float(error_table.num_rows),
        "core": float(read.core),
        "content_core": float(read.content_core),
        "reads": float(read.reads),
        "seconds": time.perf_counter() - started,
        **{phase: read.timings.get(phase, 0.0) for phase in PHASES},
    }
    return ParseResult(table, error_table, chosen.name, fallback_reason, stats)


def _inline(table: pa.Table, errors: pa.Table, n: int, first_line: int) -> pa.Table:
    """Rows and error rows in one table, in input order (`ParseResult`, `inline_errors`)."""
    k = errors.num_rows
    error_part = [errors.column("line").combine_chunks()]
    error_part += [pa.nulls(k, f.type) for f in table.schema][1:]
    error_part += [errors.column("reason").combine_chunks(), errors.column("field").combine_chunks()]
    row_part = [c.combine_chunks() for c in table.columns] + [pa.nulls(table.num_rows, pa.string())] * 2
    schema = pa.schema([*table.schema, *INLINE_ERROR_FIELDS])
    merged = [pa.concat_arrays([a, b]) for a, b in zip(row_part, error_part, strict=True)]
    lines = np.frombuffer(merged[0].buffers()[1], np.int64, count=len(merged[0]), offset=merged[0].offset)
    order = pa.array(np.argsort(lines, kind="stable"))
    return pa.Table.from_arrays([a.take(order) for a in merged], schema=schema)
