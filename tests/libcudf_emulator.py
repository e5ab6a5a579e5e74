"""A stand-in for libcudf's JSON reader where there is no GPU: what `GpuReader` would get back, made with `json`.

Only libcudf itself is replaced; the GPU reader's own host code (`read_as_text`: the type checks and casts of
`connector.parse.retype`, the UTF-8 check) runs unchanged, so the deserializer tests can run the whole gpu
path here. It follows libcudf's documented behaviour for what `connector.parse.libcudf` asks of it:
- the input is one JSON array of records, read strictly: invalid JSON, NaN/Infinity, leading zeros and raw
  control characters fail the read;
- every leaf is asked for as a string: a JSON string gives its value, escapes decoded (with `keep_quotes`,
  the same in quotes: libcudf's string parser decodes escapes either way), a number its token text,
  true/false their text, null a null;
- struct fields come back in libcudf's order, not the schema's (here: sorted by name, as libcudf's map of
  dtypes is), lists as large lists, strings as large strings.
Where libcudf's behaviour is not documented (an object where a leaf was asked for, a value where an object
was), the emulator makes the choice that is hardest on the reader: the raw JSON text, and a failed read.
Like libcudf it reads whatever records it is given as one array, so records that continue one another
(`{"a":[{}` + `{}]}`) read as one element here too: the JSON screen (`connector.strict`) is what keeps
such records away from it. Repeated names: the last one wins here, as in the exact path; what libcudf does
with them is for the GPU check to confirm.
On a machine with a GPU, `tests/test_decode.py` runs the real `GpuReader` as the `gpu` backend.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from connector.parse.reading import ReadFailed
from connector.parse.retype import read_as_text

__all__ = ["EmulatedLibcudfReader"]


class _Number(str):
    """A number token's text, as json.loads found it."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _text_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct(sorted((pa.field(f.name, _text_type(f.type)) for f in t), key=lambda f: f.name))
    if pa.types.is_list(t):
        return pa.large_list(_text_type(t.value_type))
    return pa.large_string()


def _as_text(value: Any, t: pa.DataType, keep_quotes: bool) -> Any:
    if value is None:
        return None
    if pa.types.is_struct(t):
        if not isinstance(value, dict):
            raise ReadFailed(f"emulated libcudf: a value where an object was asked for: {value!r:.40}")
        return {f.name: _as_text(value.get(f.name), f.type, keep_quotes) for f in t}
    if pa.types.is_list(t):
        if not isinstance(value, list):
            raise ReadFailed(f"emulated libcudf: a value where an array was asked for: {value!r:.40}")
        return [_as_text(v, t.value_type, keep_quotes) for v in value]
    if isinstance(value, _Number):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if keep_quotes else value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _read(text: str, schema: pa.Schema, keep_quotes: bool) -> pa.Table:
    try:
        records = json.loads(text, parse_int=_Number, parse_float=_Number, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise ReadFailed(f"emulated libcudf: {exc}") from None
    struct = pa.struct(list(schema))
    rows = [_as_text(r, struct, keep_quotes) for r in records]
    try:
        array = pa.array(rows, _text_type(struct))
    except (pa.ArrowException, UnicodeEncodeError) as exc:  # lone surrogates cannot be UTF-8
        raise ReadFailed(f"emulated libcudf: {exc}") from None
    return pa.Table.from_struct_array(array)


class EmulatedLibcudfReader:
    """`GpuReader` with libcudf replaced by the emulator above (same name, separator and host code).

    `one_read=False` takes the GPU reader's second way, for a libcudf that would not decode quoted strings.
    """

    name = "gpu"
    separator = b","

    def __init__(self, one_read: bool = True) -> None:
        self.one_read = one_read

    def read(self, data: bytes | pa.Buffer, schema: pa.Schema, *, multiline: bool = False) -> pa.Table:
        if len(data) == 0:
            return schema.empty_table()
        raw = b"".join((b"[", memoryview(data), b"]"))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReadFailed(f"emulated libcudf: {exc}") from None
        return read_as_text(lambda keep_quotes: _read(text, schema, keep_quotes), schema, one_read=self.one_read)
