"""The parse backends: which reader turns a batch's records into columns.

- cpu: `CpuReader`, msgspec decoding each record into structs made for the columns (`connector.decode.typed`).
- gpu: a batch `Reader`: records joined + an explicit Arrow schema -> an Arrow table. The GPU reader
  (pylibcudf) lives in `connector.decode.gpu` and is imported only when asked for. A reader raises
  `ReadFailed` when the input is not exactly what the schema says; it never guesses. Finding which body was
  bad is not its job (see `connector.decode.isolate`).
"""

from __future__ import annotations

import logging
from typing import Protocol

import pyarrow as pa

from connector.errors import BackendUnavailable

__all__ = ["BACKENDS", "USE_CPU", "Backend", "CpuReader", "ReadFailed", "Reader", "select_reader", "validated"]

log = logging.getLogger(__name__)
BACKENDS = ("auto", "cpu", "gpu")
# What to do when the GPU backend cannot run, in the words of each place a backend is chosen.
USE_CPU = "use the cpu backend ('parse.backend' = 'cpu' in a table, --backend cpu on the command line)"


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
    """msgspec, one record at a time into typed structs, one core (one Flink slot = one core).

    Not a batch `Reader`: `parse_batch` and `parse_contents` use `connector.decode.typed` for it.
    """

    name = "cpu"


Backend = Reader | CpuReader


_cpu = CpuReader()
_chosen: dict[str, tuple[Backend, str | None]] = {}


def select_reader(backend: str) -> tuple[Backend, str | None]:
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

        chosen: tuple[Backend, str | None] = (GpuReader(), None)
    except BackendUnavailable as exc:
        if backend == "gpu":
            raise
        log.warning("parse backend 'auto' uses the CPU: %s", exc)
        chosen = (_cpu, str(exc))
    _chosen[backend] = chosen
    return chosen
