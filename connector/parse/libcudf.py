"""GPU reader: libcudf's JSON reader through pylibcudf, memory from an rmm pool. Needs pylibcudf and a GPU.

Imported only when the "gpu" or "auto" backend is asked for. It implements the same `Reader.read` as the CPU
reader and gives the same Arrow table:
- The records go to libcudf as one JSON array (`[r1,r2,...]`): pylibcudf 26.10 cannot set a record
  delimiter other than a newline, and in an array a newline inside a record is only whitespace.
- The bytes are copied to the device once and read from there with every primitive leaf as text, quotes
  kept. `connector.parse.retype` checks each leaf's JSON type and converts it with pyarrow's casts on
  the host, since libcudf itself would take `"12"` for an integer, `5` for a string and wrap integers
  beyond 64 bits. (Should this libcudf not decode escapes with quotes kept, checked once, a second read
  without quotes gives the values.)
- libcudf is told to be strict where it would accept what the rules refuse (strict validation, no
  leading zeros, no NaN/Infinity, no raw control characters in strings); UTF-8 is checked on the result.
Such a batch fails with `ReadFailed`, and the native core decides its bad records.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from connector.errors import BackendUnavailable
from connector.parse.reading import USE_CPU, ReadFailed
from connector.parse.retype import read_as_text

try:
    import pylibcudf as plc
    import rmm
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise BackendUnavailable(
        f"pylibcudf is not importable ({exc}): install dspark-vllm[gpu] on a machine with an NVIDIA GPU, or {USE_CPU}"
    ) from exc

__all__ = ["GpuReader"]

log = logging.getLogger(__name__)
_pool_ready = False


def gpu_problem() -> str | None:
    """Why no GPU can be used here (no driver, no device), or None; asks the CUDA runtime, allocates nothing."""
    from cuda.bindings import runtime  # a dependency of pylibcudf and rmm

    error, count = runtime.cudaGetDeviceCount()
    if error != runtime.cudaError_t.cudaSuccess:
        return f"no usable NVIDIA GPU (CUDA: {error.name})"
    if not count:
        return "no NVIDIA GPU visible (CUDA counts 0 devices; check CUDA_VISIBLE_DEVICES)"
    return None


def _setup_pool() -> None:
    global _pool_ready
    if _pool_ready:
        return
    problem = gpu_problem()
    if problem:
        raise BackendUnavailable(f"{problem}; {USE_CPU}")
    try:
        size = int(os.environ.get("DSPARK_RMM_POOL_BYTES", str(2 << 30)))
        pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=size)
        rmm.mr.set_current_device_resource(pool)
    except Exception as exc:  # rmm raises RuntimeError/MemoryError/CUDA errors when the GPU is not usable
        raise BackendUnavailable(f"no usable NVIDIA GPU ({type(exc).__name__}: {exc}); {USE_CPU}") from exc
    _pool_ready = True


def _dtype(arrow_type: pa.DataType) -> tuple[Any, list[Any]]:
    """Arrow type -> pylibcudf (DataType, children) as libcudf's JSON reader takes them; leaves as text."""
    if pa.types.is_struct(arrow_type):
        children = [(f.name, *_dtype(f.type)) for f in arrow_type]
        return plc.DataType(plc.TypeId.STRUCT), children
    if pa.types.is_list(arrow_type):
        element = ("element", *_dtype(arrow_type.value_type))
        return plc.DataType(plc.TypeId.LIST), [("offsets", plc.DataType(plc.TypeId.INT32), []), element]
    return plc.DataType(plc.TypeId.STRING), []


def json_options(source: Any, schema: pa.Schema, *, keep_quotes: bool) -> Any:
    """libcudf reader options: `source` (a JSON array of records) read as `schema`'s tree, leaves as text."""
    return (
        plc.io.json.JsonReaderOptions.builder(source)
        .lines(False)
        .dtypes([(f.name, *_dtype(f.type)) for f in schema])
        .prune_columns(True)
        .keep_quotes(keep_quotes)
        .recovery_mode(plc.io.types.JSONRecoveryMode.FAIL)
        # libcudf refuses the three options below unless strict validation is already on.
        .strict_validation(True)
        .numeric_leading_zeros(False)
        .nonnumeric_numbers(False)
        .unquoted_control_chars(False)
        .build()
    )


def _metadata(name: str, children: Mapping[str, Any]) -> Any:
    return plc.interop.ColumnMetadata(name, children_meta=[_metadata(k, v) for k, v in children.items()])


def _read(source: Any, schema: pa.Schema, *, keep_quotes: bool) -> pa.Table:
    try:
        result = plc.io.json.read_json(json_options(source, schema, keep_quotes=keep_quotes))
        names = result.child_names
        metadata = [_metadata(name, names[name]) for name in map(str, result.column_names())]
        return plc.Table(list(result.columns)).to_arrow(metadata=metadata)
    except Exception as exc:  # libcudf raises RuntimeError / ValueError for bad input; CUDA errors otherwise
        _warn_if_device_error(exc)
        raise ReadFailed(f"libcudf: {type(exc).__name__}: {exc}") from None


_device_errors_seen: set[str] = set()


def _warn_if_device_error(exc: Exception) -> None:
    """Say so (once per kind) when a read failed for the device rather than the data: isolation then reads
    smaller parts, which is right for a full device memory, and the native core takes what still fails."""
    kind = type(exc).__name__
    if type(exc) in (RuntimeError, ValueError, IndexError, OverflowError) or kind in _device_errors_seen:
        return
    _device_errors_seen.add(kind)
    log.warning(
        "a GPU read failed for the device, not the data (%s: %s); affected records take smaller reads "
        "or the native core on the CPU (ParseResult.stats['core'])",
        kind,
        exc,
    )


def _on_device(data: bytes) -> Any:
    """A libcudf source of `data`, copied to the device once (every read of it reads it there).

    ReadFailed when the copy fails (device memory full): isolation then reads the batch in smaller parts.
    """
    try:
        buffer = rmm.DeviceBuffer.to_device(data)
    except Exception as exc:  # rmm raises MemoryError / RuntimeError subclasses
        _warn_if_device_error(exc)
        raise ReadFailed(f"copy to the device: {type(exc).__name__}: {exc}") from None
    # A device buffer is a `Span`, which SourceInfo reads in place (its stub names only host sources).
    return plc.io.SourceInfo([buffer])  # type: ignore[arg-type]


def _check_libcudf() -> bool:
    """What this libcudf does with the two inputs the reader depends on; True when one read per batch does.

    Strings read with quotes kept must have their escapes decoded for one read to do (libcudf's string
    parser does); otherwise a second read gives the values. Strings with an invalid escape must fail the read
    under strict validation: libcudf's string parser would make them null where the rules (the native core) reject the
    body, so without that the GPU backend refuses to start rather than give other results.
    """
    schema = pa.schema([("a", pa.string())])
    try:
        table = _read(_on_device(b'[{"a":"x\\"y"}]'), schema, keep_quotes=True)
    except ReadFailed as exc:
        raise BackendUnavailable(f"libcudf could not read a one-record JSON array ({exc}); {USE_CPU}") from None
    try:
        _read(_on_device(b'[{"a":"bad \\- escape"}]'), schema, keep_quotes=True)
    except ReadFailed:
        pass
    else:
        raise BackendUnavailable(
            "this libcudf accepts invalid string escapes under strict validation, so the gpu backend cannot give "
            f"the cpu backend's results; {USE_CPU} (and see benchmarks/libcudf_probe.py)"
        )
    return bool(table.column("a").to_pylist() == ['"x"y"'])


class GpuReader:
    name = "gpu"
    # Records are joined into one JSON array (see the module doc).
    separator = b","

    def __init__(self) -> None:
        _setup_pool()
        self.one_read = _check_libcudf()

    def read(self, data: bytes | pa.Buffer, schema: pa.Schema, *, multiline: bool = False) -> pa.Table:
        if len(data) == 0:
            return schema.empty_table()
        source = _on_device(b"".join((b"[", memoryview(data), b"]")))
        return read_as_text(
            lambda keep_quotes: _read(source, schema, keep_quotes=keep_quotes), schema, one_read=self.one_read
        )
