"""Between the deserializer and PyFlink's Arrow bridge: pruned profiles, full-length frames (pure code).

A vectorized function must return one row per input row, flat (primitives and arrays of primitives), as
pandas. `parse_batch` returns good rows and error rows apart; `to_frame` puts them back in input order,
with the internal columns `_line`, `_error`, `_error_field` and `_backend`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa

from connector.decode import ParseResult
from connector.profiles import Profile
from connector.schema.columns import output_schema

__all__ = ["INTERNAL", "flat_schema", "prune_profile", "to_frame"]

INTERNAL = pa.schema(
    [
        pa.field("_line", pa.int64()),
        pa.field("_error", pa.string()),
        pa.field("_error_field", pa.string()),
        pa.field("_backend", pa.string()),
    ]
)


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


def _series(array: pa.ChunkedArray | pa.Array) -> pd.Series:
    series = array.to_pandas()
    if pa.types.is_timestamp(array.type) and array.type.tz is not None:
        series = series.dt.tz_localize(None)
    return series


def to_frame(
    result: ParseResult,
    count: int,
    lines: np.ndarray,
    newest_before: pd.Timestamp | None,
    request_errors: Iterable[str | None] | None = None,
    require_created: bool = False,
    now: pd.Timestamp | None = None,
) -> pd.DataFrame:
    """One row per input body, in input order; error rows carry `_error` and null parsed columns.

    `result` must come from `parse_batch(..., first_line=0)`. `lines` are the source lines of the bodies.
    A row without `created` (so that a watermark never meets a null) gets `now` where given (request mode: a
    failed request happened now), else the newest `created` of the rows before it (`newest_before` for the
    batches before this one; the epoch before any): it neither moves the watermark nor is late.
    `request_errors` (request mode) turns a row into an error row whatever its body said. With
    `require_created` (the table declares a WATERMARK), a body without `created` is an error row too.
    """
    table = result.table
    positions = table.column("line").to_numpy()
    index = np.full(count, -1, dtype=np.int64)
    index[positions] = np.arange(len(positions))
    full = table.drop_columns(["line"]).take(pa.array(index, mask=index < 0))

    reason = np.full(count, None, dtype=object)
    field = np.full(count, None, dtype=object)
    if result.errors.num_rows:
        error_positions = result.errors.column("line").to_numpy()
        reason[error_positions] = result.errors.column("reason").to_numpy(zero_copy_only=False)
        field[error_positions] = result.errors.column("field").to_numpy(zero_copy_only=False)
    if request_errors is not None:
        for i, error in enumerate(request_errors):
            if error is not None:
                reason[i] = f"request failed: {error}"
                field[i] = None

    frame = pd.DataFrame({name: _series(full.column(name)) for name in full.column_names})
    if require_created and "created" in frame:
        missing = (frame["created"].isna() & pd.isna(reason)).to_numpy()
        reason[missing] = "no 'created' in the body: the table's WATERMARK needs it"
        field[missing] = "created"
    if "created" in frame:
        created = frame["created"]
        if now is not None:
            frame["created"] = created.fillna(now)
        else:
            floor = newest_before if newest_before is not None else pd.Timestamp(0)
            running = created.cummax().ffill()
            running = running.where(running > floor, floor)  # NaT (nothing yet) compares False: the floor
            frame["created"] = created.fillna(running)
    frame["_line"] = lines
    frame["_error"] = reason
    frame["_error_field"] = field
    frame["_backend"] = result.backend
    return frame
