"""The second parse: what the model wrote inside `content`, as one column per content property.

Each content is one of:
- null: every property null, no error;
- JSON (an object, or what starts like one, also inside one ```` ```json ```` fence): read against the
  properties' types. The cpu backend's native core reads them with the bodies (`connector.decode.native`);
  here, contents that pass the JSON screen (`connector.strict`) are read by the gpu backend's batch
  reader; the others, and whatever a backend refuses, one at a time through the exact path, which also
  writes `content_error`;
- free text, when the profile has `x-extract` patterns: read with them over the whole column at once
  (`connector.decode.extract`); without patterns free text is a `content_error` ("not JSON").
`content_values` runs one content through the same code (the tests' reference).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from connector.decode.exact import json_content_values
from connector.decode.extract import extract
from connector.decode.isolate import joined, read_isolating
from connector.decode.native import bools
from connector.decode.reading import BatchReader
from connector.profiles import ContentProperty
from connector.schema.columns import content_arrow_type, content_read_schema
from connector.strict import screen

__all__ = ["content_values", "parse_contents"]

log = logging.getLogger(__name__)

# One markdown fence around the whole content (JSON whitespace around it): its body is the JSON.
_FENCE = r"(?s)^[ \t\n\r]*```[A-Za-z]*[ \t]*\r?\n(?P<body>.*?)\r?\n?```[ \t\n\r]*$"
_JSON_LIKE = r"^[ \t\n\r]*[\[{]"


def _mask(array: pa.Array) -> np.ndarray:
    return bools(array)


def parse_contents(
    contents: pa.Array, properties: Sequence[ContentProperty], reader: BatchReader | None
) -> tuple[dict[str, pa.Array], pa.Array, int]:
    """Content columns and `content_error` of a string array of contents, and how many took the exact path.

    `reader`: the gpu backend's batch reader, or None (every JSON content takes the exact path).
    """
    import pyarrow.compute as pc  # imported here: it is 25 ms of `dspark-vllm parse`'s start, which seldom needs it

    n = len(contents)
    contents = contents.cast(pa.string())
    unfenced = pc.coalesce(pc.struct_field(pc.extract_regex(contents, _FENCE), [0]), contents)
    present = bools(contents.is_valid())
    json_like = _mask(pc.match_substring_regex(unfenced, _JSON_LIKE))
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

    fast = np.zeros(n, dtype=bool)
    if reader is not None and not any(p.kind == "json" for p in properties):
        fast = as_json & screen(unfenced)
        candidates = np.flatnonzero(fast)
        if len(candidates):
            strings = unfenced.take(pa.array(candidates))
            isolated = read_isolating(
                reader,
                len(candidates),
                joined(strings, reader.separator),
                content_read_schema(properties),
                multiline=True,
            )
            good = candidates[np.array(isolated.good, dtype=np.int64)]
            read = pa.concat_tables(isolated.tables).combine_chunks() if isolated.tables else None
            if read is not None:
                add(good, {p.name: read.column(p.name).chunk(0) for p in properties}, pa.nulls(len(good), pa.string()))
            fast[candidates[np.array(isolated.bad, dtype=np.int64)]] = False

    exact = np.flatnonzero(as_json & ~fast)
    texts = unfenced.take(pa.array(exact)).to_pylist() if len(exact) else []
    decided = [_json_content(text, properties) for text in texts]
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
    return out, pa.concat_arrays(error_parts).take(back), len(exact) + len(text_rows)


def _json_content(text: str, properties: Sequence[ContentProperty]) -> tuple[dict[str, Any], str | None]:
    try:
        return json_content_values(text, properties)
    except Exception as exc:  # a defect of ours must cost this content, not its batch
        log.exception("a content could not be decoded")
        return {p.name: None for p in properties}, f"internal error ({type(exc).__name__}); please report it"


def content_values(text: str | None, properties: Sequence[ContentProperty]) -> tuple[dict[str, Any], str | None]:
    """One content -> (values of the content properties, content_error or None), as a batch would give."""
    columns, errors, _ = parse_contents(pa.array([text], pa.string()), properties, None)
    return {name: column[0].as_py() for name, column in columns.items()}, errors[0].as_py()
