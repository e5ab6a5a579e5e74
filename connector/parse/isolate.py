"""Read a batch whole, and when it fails, find the records that made it fail without losing the others.

A JSON reader fails a whole batch for one bad record. `read_isolating` re-reads around it: when the reader
names the failing row it skips straight past it, otherwise it bisects. The good records come back as tables
(in input order) and the bad ones as positions, for the native core to decide.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from connector.parse.reading import BatchReader as Reader
from connector.parse.reading import ReadFailed

__all__ = ["Isolated", "joined", "read_isolating"]


@dataclass
class Isolated:
    tables: list[pa.Table] = field(default_factory=list)
    good: list[int] = field(default_factory=list)  # positions (into the records) of the rows of `tables`
    bad: list[int] = field(default_factory=list)
    reads: int = 0


def joined(records: Sequence[bytes] | pa.Array, separator: bytes) -> Callable[[int, int], pa.Buffer]:
    """Records [lo, hi) joined with `separator`, as zero-copy slices of one buffer joined once.

    Re-joining a range on every retry would cost a copy of the rest of the batch per bad record.
    `records` is a list of bytes or a (non-null) string/binary array.
    """
    import pyarrow.compute as pc  # imported here: it is 25 ms of `dspark-vllm parse`'s start, which seldom needs it

    if isinstance(records, pa.Array):
        lengths = pc.binary_length(records).to_numpy(zero_copy_only=False).astype(np.int64)
        everything = pa.ListArray.from_arrays(pa.array([0, len(records)], pa.int32()), records)
        data = pc.binary_join(everything, separator.decode())[0].as_buffer()
    else:
        lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
        data = pa.py_buffer(separator.join(records))
    ends = np.cumsum(lengths + len(separator)) - len(separator)
    starts = ends - lengths

    def chunk(lo: int, hi: int) -> pa.Buffer:
        return data.slice(int(starts[lo]), int(ends[hi - 1] - starts[lo]))

    return chunk


def read_isolating(
    reader: Reader,
    count: int,
    chunk: Callable[[int, int], bytes | pa.Buffer],
    schema: pa.Schema,
    *,
    multiline: bool = False,
    failed: ReadFailed | None = None,
) -> Isolated:
    """Parse `count` records, records [lo, hi) given by `chunk(lo, hi)`, with `reader`.

    Every record ends up in `good` (with a row in `tables`) or in `bad`. `failed`: how a read of all the
    records already failed, so that read is not made again.
    """
    out = Isolated()
    # A stack of [lo, hi) ranges still to read, in input order (top = leftmost).
    stack = [(0, count)]
    while stack:
        lo, hi = stack.pop()
        if lo >= hi:
            continue
        try:
            if failed is not None:
                known, failed = failed, None
                raise known
            out.reads += 1
            table = reader.read(chunk(lo, hi), schema, multiline=multiline)
        except ReadFailed as exc:
            if hi - lo == 1:
                out.bad.append(lo)
                continue
            row = exc.row
            if row is not None and 0 <= row < hi - lo:
                # The reader counts JSON values, not lines, so its row is where to look, not a verdict:
                # every range below is read again, the suspect on its own.
                stack.append((lo + row + 1, hi))
                stack.append((lo + row, lo + row + 1))
                stack.append((lo, lo + row))
            else:
                mid = (lo + hi) // 2
                stack.append((mid, hi))
                stack.append((lo, mid))
            continue
        if table.num_rows != hi - lo:
            # More rows than records: some record held several JSON values (`{..}{..}`).
            if hi - lo == 1:
                out.bad.append(lo)
            else:
                mid = (lo + hi) // 2
                stack.append((mid, hi))
                stack.append((lo, mid))
            continue
        out.tables.append(table)
        out.good.extend(range(lo, hi))
    return out
