"""The batch-reader protocol of the gpu backend: records joined + an explicit Arrow schema -> an Arrow table.

A `BatchReader` (the GPU reader in `connector.parse.libcudf`, the emulator in the tests) raises `ReadFailed`
when the input is not exactly what the schema says; it never guesses. Finding which record was bad is not
its job (see `connector.parse.isolate`). This module imports nothing of the package's, so the readers,
`retype` and `isolate` can all import it.
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

__all__ = ["USE_CPU", "BatchReader", "ReadFailed", "validated"]

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


class BatchReader(Protocol):
    name: str
    separator: bytes  # what records are joined with

    def read(self, data: bytes | pa.Buffer, schema: pa.Schema, *, multiline: bool = False) -> pa.Table:
        """Parse `data` (records joined with `separator`) into a table with exactly `schema`.

        `multiline`: records may contain newlines as JSON whitespace. Fields not in the schema are
        ignored; absent fields are null.
        """
        ...
