"""Typing the GPU reader's output on the host: every leaf arrives as text, pyarrow gives it its type.

libcudf's JSON reader converts values to whatever type it is asked for: it takes `"12"` for an integer,
`5` for a string, and wraps integers beyond 64 bits. So the GPU reader asks it for every primitive leaf as
a string with the quotes kept, which tells a JSON string (`"..."`, escapes decoded) from a number or a
literal (their text). `retype` then checks each leaf's JSON type against the schema and converts the text
with pyarrow's own casts, which agree with the native core (the cpu backend) to the last bit
(overflow fails, doubles are correctly rounded). Anything that does not fit raises `ReadFailed`, and the
batch's records are isolated as with any reader.

libcudf's string parser decodes escapes with and without `keep_quotes`, so the value of a string is its
quoted text without the quotes: one read does. Where a libcudf does not decode them with `keep_quotes`
(the GPU reader checks once), the batch is read a second time without, for the values.

Pure pyarrow, no GPU: the tests run it on arrays shaped like libcudf's output (struct fields in another
order, large lists, null-typed columns).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from connector.parse.flatten import list_offsets
from connector.parse.reading import ReadFailed, validated
from connector.types.columns import is_int_or_string

__all__ = ["read_as_text", "retype", "retype_table"]

_LITERALS = pa.array(["true", "false"])


def read_as_text(read: Callable[[bool], pa.Table], schema: pa.Schema, *, one_read: bool = True) -> pa.Table:
    """A batch that `read(keep_quotes)` gives with every leaf as text, typed to `schema`, UTF-8 checked.

    `one_read`: the quoted read's strings are decoded, so their values need no second read (module doc).
    """
    quoted = read(True)
    if one_read:
        return validated(retype_table(quoted, quoted, schema, unquote=True))
    return validated(retype_table(read(False), quoted, schema))


def retype_table(values: pa.Table, quoted: pa.Table, schema: pa.Schema, *, unquote: bool = False) -> pa.Table:
    """The reads of one batch (see the module doc) as a table of exactly `schema`."""
    if values.num_rows != quoted.num_rows:
        raise ReadFailed(f"the two reads disagree: {values.num_rows} and {quoted.num_rows} rows")
    arrays = []
    for field in schema:
        if field.name in values.column_names and field.name in quoted.column_names:
            arrays.append(retype(_whole(values, field.name), _whole(quoted, field.name), field, unquote=unquote))
        else:
            arrays.append(pa.nulls(values.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def retype(values: pa.Array, quoted: pa.Array, field: pa.Field, *, unquote: bool = False) -> pa.Array:
    """`values` rebuilt as `field.type`, fields matched by name; `quoted` is the same array read with quotes.

    `unquote`: `values` is the quoted read too, and a string's value is its text without the quotes.
    """
    target = field.type
    if len(values) != len(quoted):
        raise ReadFailed(f"the two reads disagree on '{field.name}': {len(values)} and {len(quoted)} values")
    if pa.types.is_null(values.type):
        return pa.nulls(len(values), target)
    if pa.types.is_struct(target):
        if not pa.types.is_struct(values.type) or not pa.types.is_struct(quoted.type):
            raise ReadFailed(f"'{field.name}': expected an object, the reader gave {values.type}")
        children = [
            retype(_child(values, f.name), _child(quoted, f.name), f, unquote=unquote)
            if values.type.get_field_index(f.name) >= 0 and quoted.type.get_field_index(f.name) >= 0
            else pa.nulls(len(values), f.type)
            for f in target
        ]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=values.is_null())
    if pa.types.is_list(target):
        if not _is_list(values.type) or not _is_list(quoted.type):
            raise ReadFailed(f"'{field.name}': expected an array, the reader gave {values.type}")
        items = retype(values.values, quoted.values, target.value_field, unquote=unquote)
        return pa.ListArray.from_arrays(list_offsets(values), items)
    return _leaf(values, quoted, field, unquote)


def _leaf(values: pa.Array, quoted: pa.Array, field: pa.Field, unquote: bool) -> pa.Array:
    target = field.type
    if not _is_text(values.type) or not _is_text(quoted.type):
        raise ReadFailed(f"'{field.name}': expected a value, the reader gave {values.type}")
    quoted = quoted.cast(pa.string())
    is_string = pc.starts_with(quoted, '"')  # null where the value is null
    if unquote:
        text = pc.if_else(is_string, pc.utf8_slice_codeunits(quoted, 1, -1), quoted)
    else:
        text = _decoded(values.cast(pa.string()), is_string, field)
    if is_int_or_string(field):
        # An integer or a string (stop_reason), kept as text: integers as pyarrow writes them.
        integers = _cast(pc.if_else(is_string, "0", text), pa.int64(), field)
        return pc.if_else(is_string, text, integers.cast(pa.string()))
    if pa.types.is_string(target):
        _expect(is_string, True, field, "a string")
        return text
    _expect(is_string, False, field, "a number" if not pa.types.is_boolean(target) else "true or false")
    if pa.types.is_boolean(target):
        literal = pc.or_(pc.is_in(text, value_set=_LITERALS), pc.is_null(text))  # is_in says False for null
        if not pc.all(literal, min_count=0).as_py():
            raise ReadFailed(f"'{field.name}': expected true or false")
        return pc.equal(text, "true")
    return _cast(text, target, field)


def _decoded(text: pa.Array, is_string: pa.Array, field: pa.Field) -> pa.Array:
    """`text`, or ReadFailed where libcudf left a JSON string null: it does so for escapes it cannot decode
    (`\\-`, `\\u12`), which the screen and the native core reject."""
    if text.null_count != is_string.null_count and pc.any(pc.and_(pc.is_null(text), is_string)).as_py():
        raise ReadFailed(f"'{field.name}': a string libcudf could not decode")
    return text


def _cast(text: pa.Array, target: pa.DataType, field: pa.Field) -> pa.Array:
    try:
        return text.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ReadFailed(f"'{field.name}': {exc}") from None


def _expect(is_string: pa.Array, want: bool, field: pa.Field, what: str) -> None:
    matches = pc.equal(is_string, want)
    if not pc.all(matches, skip_nulls=True, min_count=0).as_py():
        raise ReadFailed(f"'{field.name}': expected {what}, got another JSON type")


def _child(struct: pa.Array, name: str) -> pa.Array:
    """A struct's child, null where the struct is (a reader may leave values under null parents)."""
    return pc.struct_field(struct, [struct.type.get_field_index(name)])


def _whole(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)
