"""The parse backends: objects that read a batch of bodies into a plan's columns (one protocol, `Backend`).

- `NativeBackend` ("cpu"): the native core (native/dspark_core.cpp, through `connector.decode.native`):
  one pass per body checks the JSON rules, fills the columns and reads the content's JSON; what that pass
  leaves, the core's slow path (native/dspark_exact.cpp) decides as the exact path would, error rows and
  content errors included, so only what is not a body (and a body over the size limit) takes the exact path.
- `GpuBackend` ("gpu"): a `BatchReader` (libcudf through pylibcudf, `connector.decode.gpu`) over the bodies
  that pass the JSON screen (`strict.screen`), isolation of the records it refuses (`isolate`), and the
  nested result flattened with pyarrow.compute (`flatten`); then the contents through the same reader.

Whatever a backend does not read (it says which bodies it read) takes the exact path in `parse_batch`,
which is also the reference every backend is tested against. `parse_batch` takes a backend name or a
backend object (a test passes a `GpuBackend` over an emulated libcudf, as httpx takes a transport);
`select_backend` turns a name into an object, and is the one place where "auto" falls back to the CPU and
says so (one WARNING per process).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

import numpy as np
import pyarrow as pa

from connector.decode import native
from connector.decode.content import parse_contents
from connector.decode.isolate import joined, read_isolating
from connector.decode.plan import Plan
from connector.decode.reading import USE_CPU, BatchReader, ReadFailed
from connector.errors import BackendUnavailable, OptionsError
from connector.strict import screen

__all__ = [
    "BACKENDS",
    "USE_CPU",
    "Backend",
    "Bodies",
    "BodiesRead",
    "GpuBackend",
    "NativeBackend",
    "select_backend",
]

log = logging.getLogger(__name__)
BACKENDS = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class Bodies:
    """A batch's bodies: as Python bytes (`raw`, b"" for what is not a body) and as one joined buffer."""

    raw: list[bytes]
    data: pa.Buffer
    offsets: np.ndarray  # int64, len(raw) + 1
    not_bodies: np.ndarray  # positions of inputs that are not bytes or str (never read)


@dataclass
class BodiesRead:
    """What a backend read: the bodies at `positions` (input order or not), their columns, their contents.

    `columns`: the plan's body columns, one value per position. `content`: the content columns of those
    rows where the backend decided them (`content_decided`, a mask over positions), with `content_errors`;
    the other rows' contents are decided by `parse_batch` (exact path, `x-extract`; `content_text` marks those
    the backend found to be free text, which go to `x-extract` without being looked at again). `rejected`:
    the bodies the backend found to be error rows, with their `reasons` and `fields` (as the exact path
    writes them). `timings`: seconds by stage.
    """

    positions: np.ndarray
    columns: dict[str, pa.Array]
    content: dict[str, pa.Array] | None = None
    content_errors: pa.Array | None = None
    content_decided: np.ndarray | None = None
    content_text: np.ndarray | None = None  # over positions: contents known to be free text (not decided)
    rejected: np.ndarray | None = None  # input positions of the error rows the backend decided
    reasons: list[str] = field(default_factory=list)  # one per rejected position
    fields: list[str | None] = field(default_factory=list)
    reads: int = 0
    timings: dict[str, float] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def read_bodies(self, bodies: Bodies, plan: Plan) -> BodiesRead:
        """Read what this backend can of `bodies` into `plan`'s columns (see `BodiesRead`)."""
        ...


class NativeBackend:
    """The native core, one pass per body, on the calling thread (one Flink slot = one core)."""

    name = "cpu"

    def __init__(self) -> None:
        problem = native.available()
        if problem:
            raise BackendUnavailable(problem)

    def read_bodies(self, bodies: Bodies, plan: Plan) -> BodiesRead:
        started = time.perf_counter()
        try:
            out = native.read(plan.native, bodies.data, bodies.offsets)
        except RuntimeError:  # a defect of ours (the core refused our plan): the batch takes the exact path
            log.exception("the native core could not read a batch; its %d bodies take the exact path", len(bodies.raw))
            return BodiesRead(np.zeros(0, np.int64), {c.name: pa.nulls(0, c.arrow_type) for c in plan.columns})
        # The core's own columns follow the plan's columns and properties, by position (native/dspark_core.h): a
        # property may have one of their names ("reason", "verdict", ...), so none is looked up by name.
        own = len(plan.columns) + len(plan.properties)
        verdict = native.int8s(out.field(own))
        ok = verdict == native.OK
        # Explained (the plan's "explain"): every body is a row or an error row; the core adds reason and field.
        explained = out.type.num_fields - own >= 3
        rejected = ~ok if explained else np.zeros(len(ok), bool)
        if len(bodies.not_bodies):
            ok[bodies.not_bodies] = False
            rejected[bodies.not_bodies] = False
        every = bool(ok.all())
        keep = None if every else pa.array(ok)

        def column(index: int) -> pa.Array:
            array = out.field(index)
            return array if keep is None else array.filter(keep)

        read = BodiesRead(np.flatnonzero(ok), {c.name: column(i) for i, c in enumerate(plan.columns)})
        if rejected.any():
            mask = pa.array(rejected)
            read.rejected = np.flatnonzero(rejected)
            read.reasons = out.field(own + 1).filter(mask).to_pylist()
            read.fields = out.field(own + 2).filter(mask).to_pylist()
        if plan.properties:
            content_at = own + (3 if explained else 1)  # content_verdict, then with "explain" content_error
            content_verdict = native.int8s(out.field(content_at))
            decided = np.isin(content_verdict, (native.CONTENT_JSON, native.CONTENT_NULL))
            text = content_verdict == native.CONTENT_TEXT
            if explained:
                # Free text: the core read it with the x-extract patterns (dspark_extract.cpp), or, without
                # patterns, wrote the exact path's content_error.
                decided |= text
            read.content = {p.name: column(len(plan.columns) + i) for i, p in enumerate(plan.properties)}
            read.content_decided = decided if every else decided[ok]
            read.content_text = text if every else text[ok]
            read.content_errors = column(content_at + 1) if explained else pa.nulls(len(read.positions), pa.string())
        read.timings["read_s"] = time.perf_counter() - started
        return read


class GpuBackend:
    """A batch reader (libcudf on the GPU; an emulation of it in the tests) over the screened bodies."""

    name = "gpu"

    def __init__(self, reader: BatchReader | None = None) -> None:
        if reader is None:
            from connector.decode.gpu import GpuReader  # raises BackendUnavailable without pylibcudf or a GPU

            reader = GpuReader()
        self.reader = reader

    def read_bodies(self, bodies: Bodies, plan: Plan) -> BodiesRead:
        # Loaded with the gpu backend, not on the cpu backend's start (it imports pyarrow.compute: 25 ms).
        from connector.decode.flatten import flatten

        started = time.perf_counter()
        # Only records that pass the JSON screen go to the reader (`strict`): one object each, within the
        # rules. The rest (also truncated bodies, which would cost a failed read) take the exact path.
        passed = screen(
            pa.Array.from_buffers(
                pa.large_binary(), len(bodies.raw), [None, pa.py_buffer(bodies.offsets), bodies.data]
            ),
            bodies.raw,
        )
        if len(bodies.not_bodies):
            passed[bodies.not_bodies] = False
        candidates = np.flatnonzero(passed)
        read_started = time.perf_counter()
        raw = bodies.raw
        records = raw if len(candidates) == len(raw) else [raw[i] for i in candidates.tolist()]
        tables, good, reads = self._read(records, candidates, plan)
        parsed = pa.concat_tables(tables).combine_chunks() if tables else plan.read_schema.empty_table()
        flatten_started = time.perf_counter()
        values, needs_exact = flatten(parsed, plan.columns, plan.created_unit)
        keep = ~needs_exact
        columns = {
            c.name: values[c.name] if keep.all() else values[c.name].filter(pa.array(keep)) for c in plan.columns
        }
        read = BodiesRead(good[keep], columns, reads=reads)
        content_started = time.perf_counter()
        if plan.properties:
            assert plan.content_column is not None
            content, errors, _ = parse_contents(columns[plan.content_column], plan.properties, self.reader)
            read.content, read.content_errors = content, errors
            read.content_decided = np.ones(len(read.positions), dtype=bool)
        read.timings = {
            "screen_s": read_started - started,
            "read_s": flatten_started - read_started,
            "flatten_s": content_started - flatten_started,
            "content_s": time.perf_counter() - content_started,
        }
        return read

    def _read(self, records: list[bytes], index: np.ndarray, plan: Plan) -> tuple[list[pa.Table], np.ndarray, int]:
        """Tables of the records the reader took, the input positions of their rows (in table order), reads made.

        A batch whose integer-or-string fields (stop_reason) hold integers is read in two groups, one per type,
        instead of isolating each such body: servers that stop on token ids send them often.
        """
        reader = self.reader
        groups = [(index, records, plan.read_schema)]
        reads = 0
        failed = None
        if plan.int_probe is not None and records:
            reads += 1
            try:
                whole = reader.read(joined(records, reader.separator)(0, len(records)), plan.read_schema)
            except ReadFailed as exc:
                failed = exc
                if any(marker in str(exc) for marker in plan.int_markers):
                    failed = None
                    ints = np.array([plan.int_probe.search(r) is not None for r in records], dtype=bool)
                    groups = [
                        (index[~ints], [r for r, i in zip(records, ints, strict=True) if not i], plan.read_schema),
                        (index[ints], [r for r, i in zip(records, ints, strict=True) if i], plan.int_read_schema),
                    ]
            else:
                if whole.num_rows == len(records):
                    return [whole], index, reads
        tables: list[pa.Table] = []
        positions: list[np.ndarray] = []
        for group_index, group, schema in groups:
            isolated = read_isolating(
                reader, len(group), joined(group, reader.separator), schema, failed=failed if len(groups) == 1 else None
            )
            tables += [t if schema is plan.read_schema else t.cast(plan.read_schema) for t in isolated.tables]
            positions.append(group_index[np.array(isolated.good, dtype=np.int64)])
            reads += isolated.reads
        return tables, np.concatenate(positions), reads


@cache
def _cpu() -> NativeBackend:
    return NativeBackend()


@cache
def _gpu() -> GpuBackend:
    return GpuBackend()


@cache
def _auto() -> tuple[Backend, str | None]:
    try:
        return _gpu(), None
    except Exception as exc:  # not there (BackendUnavailable), or a device that fails to start: the CPU, said once
        reason = str(exc) if isinstance(exc, BackendUnavailable) else f"the GPU backend failed to start ({exc!r})"
        # One short line: the first clause of the reason (the whole one is in `fallback_reason`).
        log.warning("parse backend 'auto' uses the CPU: %s", re.split(r" \(|: |; ", reason, maxsplit=1)[0])
        return _cpu(), reason


def select_backend(backend: str | Backend) -> tuple[Backend, str | None]:
    """The backend object for `backend` ("auto", "cpu", "gpu", or a backend object, returned as it is) and,
    for "auto" on the CPU, why the GPU was not used.

    "auto" falls back to the CPU with one short WARNING line per process (the whole reason is the second item
    returned); "gpu" raises `BackendUnavailable` instead; a name that is no backend raises `OptionsError`.
    """
    if not isinstance(backend, str):
        return backend, None
    if backend not in BACKENDS:
        # A name that is no backend is a mistake in the call, not something missing on this machine.
        raise OptionsError(f"unknown parse backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend == "cpu":
        return _cpu(), None
    if backend == "gpu":
        return _gpu(), None
    return _auto()
