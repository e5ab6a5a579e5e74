"""Batch JSON readers: newline-delimited JSON bytes + an explicit Arrow schema -> an Arrow table.

This is the whole interface a parse backend implements (`Reader.read`). The CPU reader is pyarrow.json; the
GPU reader (pylibcudf) lives in `connector.decode.gpu` and is imported only when asked for. A reader raises
`ReadFailed` when the input is not exactly what the schema says; it never guesses. Finding which body was bad
is not its job (see `connector.decode.isolate`).
"""

from __future__ import annotations

import io
import logging
import re
from typing import Protocol

import pyarrow as pa
import pyarrow.json as pa_json

from connector.errors import BackendUnavailable

__all__ = ["BACKENDS", "USE_CPU", "CpuReader", "ReadFailed", "Reader", "select_reader", "validated"]

log = logging.getLogger(__name__)
BACKENDS = ("auto", "cpu", "gpu")
# What to do when the GPU backend cannot run, in the words of each place a backend is chosen.
USE_CPU = "use the cpu backend ('parse.backend' = 'cpu' in a table, --backend cpu on the command line)"
_ROW = re.compile(r" in row (\d+)\b")


class ReadFailed(Exception):
    """The batch could not be read as given; `row` is the first bad record when the reader knows it."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


def validated(table: pa.Table) -> pa.Table:
    """`table`, or ReadFailed when a string in it is not UTF-8.

    Readers copy string bytes as they are; a byte that is not UTF-8 outside a string fails the parse anyway,
    so checking the strings of the result checks the whole input, at a fraction of decoding it.
    """
    try:
        table.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise ReadFailed(f"invalid UTF-8 in a string ({exc})") from None
    return table


class Reader(Protocol):
    name: str
    separator: bytes  # what records are joined with

    def read(self, data: bytes | pa.Buffer, schema: pa.Schema, *, multiline: bool = False) -> pa.Table:
        """Parse `data` (records joined with `separator`) into a table with exactly `schema`.

        `multiline`: records may contain newlines as JSON whitespace. Fields not in the schema are
        ignored; absent fields are null.
        """
        ...


class CpuReader:
    """pyarrow.json: RapidJSON-based, single-threaded by default (one Flink slot = one core)."""

    name = "cpu"
    separator = b"\n"

    def __init__(self, use_threads: bool = False) -> None:
        self.use_threads = use_threads

    def read(self, data: bytes | pa.Buffer, schema: pa.Schema, *, multiline: bool = False) -> pa.Table:
        source = pa.BufferReader(data) if isinstance(data, pa.Buffer) else io.BytesIO(data)
        options = pa_json.ReadOptions(use_threads=self.use_threads, block_size=max(len(data) + 1, 1 << 20))
        parse = pa_json.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=multiline
        )
        try:
            table = pa_json.read_json(source, read_options=options, parse_options=parse)
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            match = _ROW.search(str(exc))
            raise ReadFailed(str(exc), int(match.group(1)) if match else None) from exc
        return validated(table)


_cpu = CpuReader()
_chosen: dict[str, tuple[Reader, str | None]] = {}


def select_reader(backend: str) -> tuple[Reader, str | None]:
    """The reader for `backend` ("auto", "cpu", "gpu") and, for "auto" on CPU, why the GPU was not used.

    "auto" falls back to the CPU with one WARNING per process; "gpu" raises `BackendUnavailable` instead.
    """
    if backend not in BACKENDS:
        raise BackendUnavailable(f"unknown parse backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend == "cpu":
        return _cpu, None
    if backend in _chosen:
        return _chosen[backend]
    try:
        from connector.decode.gpu import GpuReader

        chosen: tuple[Reader, str | None] = (GpuReader(), None)
    except BackendUnavailable as exc:
        if backend == "gpu":
            raise
        log.warning("parse backend 'auto' uses the CPU: %s", exc)
        chosen = (_cpu, str(exc))
    _chosen[backend] = chosen
    return chosen
