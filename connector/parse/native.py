"""The native parser core (native/dspark_core.cpp) through its C ABI: a plan and bodies in, Arrow columns out.

The core is a plain shared library (no Python in it), loaded with ctypes, so one build serves every Python
version and the same entry point serves the JVM. `Plan.of(...)` writes the versioned plan
document the core reads; `read(plan, data, offsets)` returns the core's struct array: the plan's columns, the
content properties' columns, `verdict` (per body: 0 a row, else the category of its error), `reason` and
`field` (the reference path's, tests/oracle, byte for byte) and, with content properties, `content_verdict`
(see `CONTENT_*`) and `content_error`. That is with the plan's "explain" (the default here); without it the
core gives only verdicts for what its fast pass leaves (and no reasons), for a caller that decides those
itself. Arrays come through the Arrow C data interface: pyarrow takes the core's buffers as they are, and frees
them through the core's release callbacks.
"""

from __future__ import annotations

import ctypes
import json
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from connector.errors import BackendUnavailable

# The versions and codes of the core's C ABI: declared once in native/contract.py, generated for each side.
from connector.parse._core_contract import (
    ABI_VERSION,
    CONTENT_DEFERRED,
    CONTENT_JSON,
    CONTENT_NULL,
    CONTENT_TEXT,
    KINDS,
    OK,
    PLAN_VERSION,
    RESULT_LIST,
    RESULT_UTF8,
)
from connector.parse._core_contract import DONE as _DONE
from connector.parse._core_contract import INTERNAL as _INTERNAL
from connector.parse._core_contract import OUTPUT_TOO_LARGE as _OUTPUT_TOO_LARGE
from connector.profiles import ContentProperty
from connector.strict import MAX_BODY_BYTES
from connector.types.columns import Column

__all__ = [
    "ABI_VERSION",
    "CONTENT_DEFERRED",
    "CONTENT_JSON",
    "CONTENT_NULL",
    "CONTENT_TEXT",
    "OK",
    "CoreFailed",
    "NativePlan",
    "bools",
    "int8s",
    "library_path",
    "read",
    "result_columns",
]

_DIR = Path(__file__).resolve().parent.parent / "_native"
# The data of a batch whose bodies are all empty: the core refuses a NULL pointer for n > 0 bodies (with
# data_len 0 it reads no byte of it; a body shorter than SIMDJSON_PADDING before the end is copied).
_NO_BYTES = ctypes.create_string_buffer(1)


class _ArrowSchema(ctypes.Structure):
    pass


_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowSchema))),
    ("dictionary", ctypes.POINTER(_ArrowSchema)),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
    ("dictionary", ctypes.POINTER(_ArrowArray)),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def library_path() -> Path:
    """The build of the core for this CPU (native/build_native.py builds one per x86-64 level)."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        haswell = {"avx2", "bmi1", "bmi2", "pclmulqdq", "lzcnt" if "lzcnt" in _cpu_flags() else "abm"}
        name = "libdspark-haswell.so" if haswell <= _cpu_flags() else "libdspark-x86-64.so"
        return _DIR / name
    return _DIR / "libdspark.so"


@cache
def _library() -> ctypes.CDLL:
    path = library_path()
    if not path.is_file():
        raise BackendUnavailable(
            f"the native parser core is not built ({path} is missing): install the package with pip "
            "(pip install -e . builds it) or run: python native/build_native.py"
        )
    lib = ctypes.CDLL(str(path))
    lib.dspark_abi_version.restype = ctypes.c_int32
    if lib.dspark_abi_version() != ABI_VERSION:
        raise BackendUnavailable(f"{path} has ABI {lib.dspark_abi_version()}, not {ABI_VERSION}: rebuild it")
    lib.dspark_parse.restype = ctypes.c_int32
    lib.dspark_parse.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.POINTER(_ArrowArray),
        ctypes.POINTER(_ArrowSchema),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    return lib


def available() -> str | None:
    """None when the core can be loaded here, else why not."""
    try:
        _library()
    except (BackendUnavailable, OSError) as exc:
        return str(exc)
    return None


class CoreFailed(RuntimeError):
    """The core could not finish a call; `code` is its return code (the contract's)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code

    @property
    def fewer(self) -> bool:
        """Whether fewer bodies a call may do: too large an output, or out of memory (the JVM's rule too)."""
        return self.code in (_OUTPUT_TOO_LARGE, _INTERNAL)


@dataclass(frozen=True)
class NativePlan:
    """The plan document of a set of columns (and the content properties read from one of them)."""

    document: bytes
    content_column: str | None

    @classmethod
    def of(
        cls,
        columns: Sequence[Column],
        created_unit: str,
        properties: Sequence[ContentProperty] = (),
        max_body_bytes: int = MAX_BODY_BYTES,
        max_column_bytes: int | None = None,
        explain: bool = True,
    ) -> NativePlan:
        """`max_column_bytes`: below Arrow's 2 GiB only to test that a batch is then read in parts. `explain`:
        the core decides every body (a row, or the reason and field of its error) and every content (its
        values and content_error), as the reference path (tests/oracle) would; without it, what its fast pass
        leaves gets a verdict and nulls."""
        names = [c.name for c in columns]
        plan: dict[str, object] = {
            "version": PLAN_VERSION,
            "created_unit": created_unit,
            "max_body_bytes": max_body_bytes,
            "explain": explain,
            **({"max_column_bytes": max_column_bytes} if max_column_bytes else {}),
            "columns": [{"name": c.name, "kind": c.kind, "paths": [list(p) for p in c.paths]} for c in columns],
        }
        content_column = None
        if properties:
            content_column = "content"
            plan["content"] = {
                "column": names.index(content_column),
                # Free text is read by the x-extract patterns when a property has one: no error to write then.
                "text_errors": not any(p.extract is not None for p in properties),
                "properties": [
                    {
                        "name": p.name,
                        "kind": p.kind,
                        **({"item_kind": p.item_kind} if p.item_kind else {}),
                        **({"extract": {"pattern": p.extract.source, "mode": p.extract.mode}} if p.extract else {}),
                    }
                    for p in properties
                ],
            }
        return cls(json.dumps(plan).encode(), content_column)


def result_columns(
    columns: Sequence[Column], properties: Sequence[ContentProperty] = ()
) -> list[tuple[str, str, str | None]]:
    """The named columns of the core's result for a plan of `columns` (and content `properties`), in its order:
    each column, each property, then content_error where there are properties; each as (name, type code, item
    type code of a list or None), the contract's `RESULT_*` codes (a column read through a path with `*` is a list
    of its kind's values, but for `length`). The core's own verdict, reason and field follow them."""

    def leaf(kind: str) -> str:
        if kind == "array" or kind not in KINDS:
            raise ValueError(f"no column kind {kind!r} in the native core")
        return KINDS[kind]

    out: list[tuple[str, str, str | None]] = []
    for c in columns:
        star = c.kind != "length" and any("*" in path for path in c.paths)
        out.append((c.name, RESULT_LIST, leaf(c.kind)) if star else (c.name, leaf(c.kind), None))
    for p in properties:
        item = p.item_kind or ""
        out.append((p.name, RESULT_LIST, leaf(item)) if p.kind == "array" else (p.name, leaf(p.kind), None))
    if properties:
        out.append(("content_error", RESULT_UTF8, None))
    return out


def int8s(array: pa.Array) -> np.ndarray:
    """The values of an int8 array without nulls, as numpy: a view of its buffer, no copy."""
    return np.frombuffer(array.buffers()[1], np.int8, count=len(array), offset=array.offset)


def bools(array: pa.Array) -> np.ndarray:
    """A boolean array as a numpy mask, null as False, unpacked from its buffers."""
    n, offset = len(array), array.offset
    validity, values = array.buffers()[:2]

    def unpacked(buffer: pa.Buffer) -> np.ndarray:
        bits = np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")
        return bits[offset : offset + n].astype(bool)

    mask = unpacked(values) if values is not None else np.zeros(n, bool)
    return mask & unpacked(validity) if validity is not None and array.null_count else mask


def read(plan: NativePlan, data: pa.Buffer | bytes, offsets: np.ndarray) -> pa.StructArray:
    """The core's struct array for the bodies `data[offsets[i]:offsets[i + 1]]` (offsets: int64, n + 1).

    A batch whose columns would outgrow Arrow's 2 GiB string offsets is read in halves (a plan's small
    `max_column_bytes` in the tests; `parse_batch` gives the core parts small enough never to get there).
    Halves whose columns together still outgrow 2 GiB cannot be one array. A call the core cannot finish
    raises `CoreFailed`.
    """
    lib = _library()
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    array, schema = _ArrowArray(), _ArrowSchema()
    error = ctypes.create_string_buffer(512)
    code = lib.dspark_parse(
        plan.document,
        len(plan.document),
        buffer.address if buffer.size else ctypes.addressof(_NO_BYTES),
        buffer.size,
        offsets.ctypes.data,
        n,
        ctypes.byref(array),
        ctypes.byref(schema),
        error,
        len(error),
    )
    if code == _OUTPUT_TOO_LARGE and n > 1:
        half = n // 2
        parts = [read(plan, buffer, offsets[: half + 1]), read(plan, buffer, offsets[half:])]
        try:
            return pa.concat_arrays(parts)  # type: ignore[return-value]
        except pa.ArrowInvalid as exc:  # offset overflow: more than one array can hold
            raise CoreFailed(f"native parser core: {exc}: give fewer bodies at a time", _OUTPUT_TOO_LARGE) from exc
    if code != _DONE:
        raise CoreFailed(f"native parser core: {error.value.decode(errors='replace')} (code {code})", code)
    return pa.Array._import_from_c(ctypes.addressof(array), ctypes.addressof(schema))  # type: ignore[attr-defined]
