"""Vectorized: a table of parsed bodies (nested, as the readers give it) -> the flat output columns.

Walks each column's path with pyarrow.compute (struct fields, first list element, per-element maps), so the
cost is per batch, not per body. Rows whose values need a decision the vectorized code does not make (error
responses, out-of-range timestamps, ISO strings) are flagged for the native core, which decides those bodies.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.types.columns import MS_MAX, MS_MIN, TIMESTAMP, Column

__all__ = ["created_ms", "flatten", "list_offsets"]


def _first_index(lists: pa.Array) -> pa.Array:
    """Where element 0 of every list is in `lists.values` (null for null or empty lists)."""
    lengths = pc.list_value_length(lists)
    starts = lists.offsets[:-1]
    return pc.if_else(pc.greater(lengths, 0), starts, pa.scalar(None, pa.int32()))


def _walk(array: pa.Array, path: Sequence[str]) -> pa.Array:
    # Element 0 ("0") is taken at the end, from the leaf only: taking it first would copy every field of the
    # list's items (all of choices[0], contents included) for each column.
    index = None
    for segment in path:
        if segment == "0":
            if index is not None:
                array = array.take(index)
            index = _first_index(array)
            array = array.values
        else:
            array = pc.struct_field(array, [array.type.get_field_index(segment)])
    return array if index is None else array.take(index)


def _coalesce(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pc.coalesce(*arrays)


def _top(raw: pa.Table, name: str) -> pa.Array:
    column = raw.column(name)
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _column(raw: pa.Table, column: Column) -> pa.Array:
    def walk(path: Sequence[str]) -> pa.Array:
        return _walk(_top(raw, path[0]), path[1:])

    if column.kind == "length":
        return pc.list_value_length(walk(column.paths[0])).cast(pa.int64())
    star = column.star
    if star is None:
        return _coalesce([walk(p) for p in column.paths])
    lists = walk(column.paths[0][:star])
    values = _coalesce([_walk(lists.values, p[star + 1 :]) for p in column.paths])
    return pa.ListArray.from_arrays(list_offsets(lists), values)


def list_offsets(lists: pa.Array) -> pa.Array:
    """int32 offsets of a (large) list array into its `.values`, null where the list is null.

    `ListArray.from_arrays(list_offsets(a), new_values)` rebuilds `a` over new values, nulls included.
    """
    offsets = lists.offsets.cast(pa.int32())
    if not lists.null_count:
        return offsets
    # Offsets that are null make null lists in from_arrays.
    return pa.array(offsets.to_numpy(), pa.int32(), mask=np.append(~lists.is_valid().to_numpy(False), False))


def created_ms(values: pa.Array, unit: str) -> tuple[pa.Array, np.ndarray]:
    """`created` as epoch ms, and a mask of rows the vectorized conversion leaves to the native core."""
    if unit == "iso":
        out: list[int | None] = []
        left = np.zeros(len(values), dtype=bool)
        for i, text in enumerate(values.to_numpy(zero_copy_only=False).tolist()):
            if text is None:
                out.append(None)
                continue
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                left[i] = True
                out.append(None)
                continue
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
            ms = delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
            left[i] = not MS_MIN <= ms <= MS_MAX
            out.append(ms)
        return pa.array(out, pa.int64()), left
    scale = 1000 if unit == "seconds" else 1
    in_range = pc.and_(pc.greater_equal(values, MS_MIN // scale), pc.less_equal(values, MS_MAX // scale)).fill_null(
        True
    )
    safe = pc.if_else(in_range, values, 0)
    ms = pc.multiply(safe, scale) if scale != 1 else safe
    return ms, ~in_range.to_numpy(zero_copy_only=False)


def flatten(raw: pa.Table, columns: Sequence[Column], created_unit: str) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The flat columns of `raw`, and a boolean mask of the rows left to the native core."""
    left = np.zeros(raw.num_rows, dtype=bool)
    if raw.num_rows == 0:
        return {c.name: pa.array([], c.arrow_type) for c in columns}, left
    error = _top(raw, "error")
    left |= error.is_valid().to_numpy(zero_copy_only=False)
    out: dict[str, pa.Array] = {}
    for column in columns:
        values = _column(raw, column)
        if column.kind == "timestamp":
            ms, bad = created_ms(values, created_unit)
            left |= bad
            values = ms.cast(TIMESTAMP)
        elif column.name == "object":
            left |= pc.equal(values, "error").fill_null(False).to_numpy(zero_copy_only=False)
        out[column.name] = values
    return out, left
