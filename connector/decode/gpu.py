"""GPU reader: libcudf's JSON reader through pylibcudf, memory from an rmm pool. Needs pylibcudf and a GPU.

Imported only when the "gpu" or "auto" backend is asked for. It implements the same `Reader.read` as the CPU
reader and gives the same Arrow table. Where libcudf would accept what the CPU reader refuses, it is told not
to (strict validation, no leading zeros, no NaN/Infinity, no raw control characters in strings), and what it
cannot check is checked on the host: numbers of 19+ digits (libcudf wraps integers beyond 64 bits) before
the bytes go to the device, UTF-8 in the strings of the result after. Such a batch fails, and the exact path
decides its bad records.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pyarrow as pa

from connector.decode.flatten import list_offsets
from connector.decode.readers import ReadFailed, validated
from connector.errors import BackendUnavailable

try:
    import pylibcudf as plc
    import rmm
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise BackendUnavailable(
        f"pylibcudf is not importable ({exc}): install dspark-vllm[gpu] on a machine with an NVIDIA GPU, "
        "or set 'parse.backend' = 'cpu'"
    ) from exc

__all__ = ["GpuReader"]

# 19+ digits may not fit in int64, and libcudf wraps instead of failing.
_LONG_NUMBER = re.compile(rb"\d{19}")
_pool_ready = False


def _setup_pool() -> None:
    global _pool_ready
    if _pool_ready:
        return
    try:
        size = int(os.environ.get("DSPARK_RMM_POOL_BYTES", str(2 << 30)))
        pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=size)
        rmm.mr.set_current_device_resource(pool)
    except Exception as exc:  # rmm raises RuntimeError/MemoryError/CUDA errors when there is no usable GPU
        raise BackendUnavailable(
            f"no usable NVIDIA GPU ({type(exc).__name__}: {exc}); set 'parse.backend' = 'cpu'"
        ) from exc
    _pool_ready = True


def _dtype(arrow_type: pa.DataType) -> tuple[Any, list[Any]]:
    """Arrow type -> pylibcudf (DataType, children) as libcudf's JSON reader takes them."""
    if pa.types.is_struct(arrow_type):
        children = [(f.name, *_dtype(f.type)) for f in arrow_type]
        return plc.DataType(plc.TypeId.STRUCT), children
    if pa.types.is_list(arrow_type):
        element = ("element", *_dtype(arrow_type.value_type))
        return plc.DataType(plc.TypeId.LIST), [("offsets", plc.DataType(plc.TypeId.INT32), []), element]
    if pa.types.is_string(arrow_type):
        return plc.DataType(plc.TypeId.STRING), []
    return plc.DataType.from_arrow(arrow_type), []


def _metadata(name: str, children: dict[str, Any]) -> Any:
    return plc.interop.ColumnMetadata(name, children_meta=[_metadata(k, v) for k, v in children.items()])


def _conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """Rebuild `array` as `target`, matching struct fields by name (libcudf orders them its own way)."""
    if pa.types.is_struct(target):
        present = {array.type.field(i).name: i for i in range(array.type.num_fields)}
        children = [
            _conform(array.field(present[f.name]), f.type) if f.name in present else pa.nulls(len(array), f.type)
            for f in target
        ]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if pa.types.is_list(target) or pa.types.is_large_list(array.type):
        return pa.ListArray.from_arrays(list_offsets(array), _conform(array.values, target.value_type))
    return array.cast(target)


class GpuReader:
    name = "gpu"
    # Records are split on a byte that valid JSON never holds raw, so a record may contain newlines.
    separator = b"\x1e"

    def __init__(self) -> None:
        _setup_pool()

    def read(self, data: bytes | pa.Buffer, schema: pa.Schema, *, multiline: bool = False) -> pa.Table:
        host = data.to_pybytes() if isinstance(data, pa.Buffer) else data
        if _LONG_NUMBER.search(host):
            raise ReadFailed("a number of 19 or more digits (libcudf would wrap it)")
        dtypes = [(f.name, *_dtype(f.type)) for f in schema]
        options = (
            plc.io.json.JsonReaderOptions.builder(plc.io.SourceInfo([host]))
            .lines(True)
            .delimiter(self.separator.decode())
            .dtypes(dtypes)
            .prune_columns(True)
            .recovery_mode(plc.io.types.JSONRecoveryMode.FAIL)
            .numeric_leading_zeros(False)
            .nonnumeric_numbers(False)
            .unquoted_control_chars(False)
            .strict_validation(True)
            .build()
        )
        try:
            result = plc.io.json.read_json(options)
        except Exception as exc:  # libcudf raises RuntimeError / ValueError subclasses for bad input
            raise ReadFailed(f"libcudf: {exc}") from None
        names = result.child_names
        metadata = [_metadata(name, names[name]) for name in result.column_names()]
        table = plc.Table(list(result.columns)).to_arrow(metadata=metadata)
        if table.num_rows == 0 and host.strip():
            raise ReadFailed("libcudf read no rows")
        columns = {name: table.column(name).combine_chunks() for name in table.column_names}
        arrays = [
            _conform(columns[f.name], f.type) if f.name in columns else pa.nulls(table.num_rows, f.type) for f in schema
        ]
        return validated(pa.Table.from_arrays(arrays, schema=schema))
