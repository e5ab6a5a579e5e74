"""Between the deserializer and PyFlink's Arrow bridge: pruned profiles, full-length tables (pure code).

A vectorized function must return one row per input row, flat (primitives and arrays of primitives).
`parse_batch(..., inline_errors=True)` gives every body's row in input order, error rows included; `to_table`
adds the internal columns `_line`, `_error`, `_error_field` and `_backend` (and settles `created`), as Arrow
(the function hands it to PyFlink as it is: `connector.flink.pyflink_fixes.arrow_results`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.parse import ParseResult
from connector.plan.contract import PARSE_INTERNAL
from connector.profiles import Profile
from connector.types.columns import output_schema

__all__ = ["INTERNAL", "flat_schema", "prune_profile", "to_table"]

_ARROW = {"BIGINT": pa.int64(), "STRING": pa.string()}
INTERNAL = pa.schema([pa.field(name, _ARROW[kind]) for name, kind in PARSE_INTERNAL])


def prune_profile(profile: Profile, needed: Iterable[str]) -> Profile:
    """The profile reduced to the columns in `needed`: the parser reads only those.

    Content properties need the `content` column; `content_error` comes with any content property.
    """
    wanted = set(needed)
    properties = tuple(p for p in profile.content_properties if p.name in wanted or "content_error" in wanted)
    if properties:
        wanted.add("content")
    columns = tuple(c for c in profile.columns if c["name"] in wanted)
    return dataclasses.replace(profile, columns=columns, content_properties=properties)


def flat_schema(profile: Profile) -> pa.Schema:
    """What the parse function returns: the profile's columns without `line`, then `INTERNAL`."""
    fields = [f for f in output_schema(profile) if f.name != "line"]
    return pa.schema([*fields, *INTERNAL])


_NO_TIME = np.iinfo(np.int64).min


def _created_ms(created: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Milliseconds since the epoch (nulls as the smallest int64) and the null mask."""
    millis = pc.cast(created, pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    missing = np.asarray(pc.is_null(millis).to_numpy(zero_copy_only=False), dtype=bool)
    values = np.asarray(pc.fill_null(millis, _NO_TIME).to_numpy(), dtype=np.int64)
    return values, missing


def to_table(
    result: ParseResult,
    count: int,
    lines: np.ndarray,
    newest_before_ms: int | None,
    request_errors: Iterable[str | None] | None = None,
    require_created: bool = False,
    now_ms: int | None = None,
) -> pa.Table:
    """One row per input body, in input order; error rows carry `_error` and null parsed columns (Arrow).

    `result` must come from `parse_batch(..., inline_errors=True)`. `lines` are the source lines of the bodies.
    A row without `created` (so that a watermark never meets a null) gets `now_ms` where given (request mode:
    a failed request happened now), else the newest `created` of the rows before it (`newest_before_ms` for the
    batches before this one; the epoch before any): it neither moves the watermark nor is late.
    `request_errors` (request mode) turns a row into an error row whatever its body said. With
    `require_created` (the table declares a WATERMARK), a body without `created` is an error row too.
    """
    table = result.table
    if table.num_rows != count or "error_reason" not in table.column_names:
        raise ValueError("to_table needs every body's row: parse_batch(..., inline_errors=True)")
    full = table.drop_columns(["line", "error_reason", "error_field"])
    reason = table.column("error_reason").to_numpy(zero_copy_only=False).astype(object)
    field = table.column("error_field").to_numpy(zero_copy_only=False).astype(object)
    if request_errors is not None:
        for i, error in enumerate(request_errors):
            if error is not None:
                reason[i] = f"request failed: {error}"
                field[i] = None

    if "created" in full.column_names:
        values, missing = _created_ms(full.column("created"))
        if require_created:
            absent = missing & np.array([r is None for r in reason], dtype=bool)
            reason[absent] = "no 'created' in the body: the table's WATERMARK needs it"
            field[absent] = "created"
        if now_ms is not None:
            filled = np.where(missing, now_ms, values)
        else:
            floor = newest_before_ms if newest_before_ms is not None else 0
            running = np.maximum(np.maximum.accumulate(values) if count else values, floor)
            filled = np.where(missing, running, values)
        created = pa.array(filled, type=pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        full = full.set_column(full.column_names.index("created"), "created", created)
    # Built column by column: a batch that reads no profile column still has `count` rows.
    names = [*full.column_names, *INTERNAL.names]
    arrays = [
        *full.columns,
        pa.array(lines, type=pa.int64()),
        pa.array(reason, type=pa.string()),
        pa.array(field, type=pa.string()),
        pa.array([result.backend] * count, type=pa.string()),
    ]
    return pa.Table.from_arrays(arrays, names=names)
