"""The second parse: what the model wrote inside `content`, as one column per content property.

Contents that look like one JSON object go through the batch reader (the same backend as the bodies); the
rest (free text read with the profile's `x-extract` patterns, fenced JSON, truncated or invalid JSON) and
whatever the reader refuses go through the exact path, which also writes `content_error`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.decode.exact import content_values
from connector.decode.isolate import joined, read_isolating
from connector.decode.readers import Reader
from connector.profiles import ContentProperty
from connector.schema.columns import content_arrow_type, content_read_schema

__all__ = ["parse_contents"]


def parse_contents(
    contents: pa.Array, properties: Sequence[ContentProperty], reader: Reader
) -> tuple[dict[str, pa.Array], pa.Array, int]:
    """Content columns and `content_error` of a string array of contents, and how many took the exact path."""
    n = len(contents)
    fast = np.zeros(n, dtype=bool)
    if not any(p.kind == "json" for p in properties):
        trimmed = pc.utf8_trim_whitespace(contents)
        looks_like_object = pc.and_(pc.starts_with(trimmed, "{"), pc.ends_with(trimmed, "}")).fill_null(False)
        fast = looks_like_object.to_numpy(zero_copy_only=False).copy()
    candidates = np.flatnonzero(fast)
    columns: dict[str, list[pa.Array]] = {p.name: [] for p in properties}
    order: list[np.ndarray] = []
    if len(candidates):
        strings = contents.take(pa.array(candidates))
        isolated = read_isolating(
            reader,
            len(candidates),
            joined(strings, reader.separator),
            content_read_schema(properties),
            multiline=True,
        )
        for table in isolated.tables:
            for p in properties:
                columns[p.name].append(table.column(p.name).combine_chunks())
        order.append(candidates[np.array(isolated.good, dtype=np.int64)])
        fast[candidates[np.array(isolated.bad, dtype=np.int64)]] = False
    slow = np.flatnonzero(~fast)
    # to_numpy makes the Python strings ~15x faster than to_pylist (None for nulls all the same).
    texts = contents.take(pa.array(slow)).to_numpy(zero_copy_only=False).tolist() if len(slow) else []
    slow_values = [content_values(text, properties) for text in texts]
    for p in properties:
        columns[p.name].append(pa.array([v[0][p.name] for v in slow_values], content_arrow_type(p)))
    order.append(slow)
    errors = pa.array([None] * (n - len(slow)) + [v[1] for v in slow_values], pa.string())
    # Rows came out as [fast rows in reader order..., slow rows]: put them back in input order.
    positions = np.concatenate(order) if order else np.zeros(0, dtype=np.int64)
    back = pa.array(np.argsort(positions, kind="stable"))
    out = {name: pa.concat_arrays(parts).take(back) for name, parts in columns.items()}
    return out, errors.take(back), len(slow)
