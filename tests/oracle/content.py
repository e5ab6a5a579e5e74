"""The reference of the second parse: what the model wrote inside `content`, as one column per content property.

Each content is one of:
- null: every property null, no error;
- JSON (an object, or what starts like one, also inside one ```` ```json ```` fence): read against the
  properties' types, one at a time by the exact path (`tests.oracle.exact`), which also writes
  `content_error`;
- free text, when the profile has `x-extract` patterns: read with them over the whole column at once
  (`tests.oracle.extract`); without patterns free text is a `content_error` ("not JSON").
The native core (and on gpu libcudf, for the contents it reads) is held to this; `content_values` runs one
content through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from connector.parse.native import bools
from connector.profiles import ContentProperty
from connector.types.columns import content_arrow_type
from tests.oracle.exact import json_content_values
from tests.oracle.extract import extract

__all__ = ["content_values", "parse_contents"]

# One markdown fence around the whole content (JSON whitespace around it): its body is the JSON.
_FENCE = r"(?s)^[ \t\n\r]*```[A-Za-z]*[ \t]*\r?\n(?P<body>.*?)\r?\n?```[ \t\n\r]*$"
_JSON_LIKE = r"^[ \t\n\r]*[\[{]"


def parse_contents(contents: pa.Array, properties: Sequence[ContentProperty]) -> tuple[dict[str, pa.Array], pa.Array]:
    """Content columns and `content_error` of a string array of contents."""
    import pyarrow.compute as pc

    n = len(contents)
    contents = contents.cast(pa.string())
    unfenced = pc.coalesce(pc.struct_field(pc.extract_regex(contents, _FENCE), [0]), contents)
    present = bools(contents.is_valid())
    json_like = bools(pc.match_substring_regex(unfenced, _JSON_LIKE))
    free_text = present & ~json_like if any(p.extract is not None for p in properties) else np.zeros(n, bool)
    as_json = present & ~free_text

    parts: dict[str, list[pa.Array]] = {p.name: [] for p in properties}
    error_parts: list[pa.Array] = []
    order: list[np.ndarray] = []

    def add(positions: np.ndarray, columns: dict[str, pa.Array], errors: pa.Array) -> None:
        for p in properties:
            parts[p.name].append(columns[p.name])
        error_parts.append(errors)
        order.append(positions)

    exact = np.flatnonzero(as_json)
    texts = unfenced.take(pa.array(exact)).to_pylist() if len(exact) else []
    decided = [json_content_values(text, properties) for text in texts]
    add(
        exact,
        {p.name: pa.array([v[0][p.name] for v in decided], content_arrow_type(p)) for p in properties},
        pa.array([v[1] for v in decided], pa.string()),
    )

    text_rows = np.flatnonzero(free_text)
    if len(text_rows):
        columns, errors = extract(contents.take(pa.array(text_rows)), properties)
        add(text_rows, columns, errors)

    absent = np.flatnonzero(~present)
    add(
        absent,
        {p.name: pa.nulls(len(absent), content_arrow_type(p)) for p in properties},
        pa.nulls(len(absent), pa.string()),
    )

    # Rows came out grouped by how they were read: put them back in input order.
    back = pa.array(np.argsort(np.concatenate(order), kind="stable"))
    out = {name: pa.concat_arrays(arrays).take(back) for name, arrays in parts.items()}
    return out, pa.concat_arrays(error_parts).take(back)


def content_values(text: str | None, properties: Sequence[ContentProperty]) -> tuple[dict[str, Any], str | None]:
    """One content -> (values of the content properties, content_error or None), as a batch would give."""
    columns, errors = parse_contents(pa.array([text], pa.string()), properties)
    return {name: column[0].as_py() for name, column in columns.items()}, errors[0].as_py()
