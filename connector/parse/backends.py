"""The parse backends: objects that decide every body of a batch (one protocol, `Backend`).

- `NativeBackend` ("cpu"): the native core (native/dspark_core.cpp, through `connector.parse.native`):
  one pass per body checks the JSON rules, fills the columns and reads the content's JSON; what that pass
  leaves, the core's slow path (native/dspark_exact.cpp) decides, error rows and content errors included.
- `GpuBackend` ("gpu"): a `BatchReader` (libcudf through pylibcudf, `connector.parse.libcudf`) over the bodies
  that pass the JSON screen (`strict.screen`), isolation of the records it refuses (`isolate`), the nested
  result flattened with pyarrow.compute (`flatten`), then the contents through the same reader. What libcudf
  leaves (bodies it refuses or the screen keeps from it, values `flatten` does not decide, contents it does
  not read) goes to the native core in one call, as a batch of those bodies: the core decides them whole.

Either way every body but what is not a body (None, a number: `parse_batch` writes their error rows) is a
row or an error row, so no Python parser runs for a batch; the Python reference the core and libcudf are held
to lives with the tests (tests/oracle). `parse_batch` takes a backend name or a backend object (a test passes
a `GpuBackend` over an emulated libcudf, as httpx takes a transport); `select_backend` turns a name into an
object, and is the one place where "auto" falls back to the CPU and says so (one WARNING per process).
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

from connector.errors import BackendUnavailable, OptionsError
from connector.parse import native
from connector.parse.isolate import joined, read_isolating
from connector.parse.plan import Plan
from connector.parse.reading import USE_CPU, BatchReader, ReadFailed
from connector.profiles import ContentProperty
from connector.strict import screen
from connector.types.columns import content_arrow_type, content_read_schema

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
# How an error row of ours (a defect, not the body's fault) ends.
REPORT = "please report it with this body"


@dataclass(frozen=True)
class Bodies:
    """A batch's bodies: as Python bytes (`raw`, b"" for what is not a body) and as one joined buffer."""

    raw: list[bytes]
    data: pa.Buffer
    offsets: np.ndarray  # int64, len(raw) + 1
    not_bodies: np.ndarray  # positions of inputs that are not bytes or str (never read)


@dataclass
class BodiesRead:
    """What a backend decided: rows for the bodies at `positions` (input order or not), error rows for those at
    `rejected`; together every body but `Bodies.not_bodies` (a body in neither is a defect of ours, which
    `parse_batch` makes an "internal error" row).

    `columns`: the plan's body columns, one value per position. `content` and `content_errors`: the content
    columns of those rows (when the plan has content properties). `reasons` and `fields`: one per rejected
    position (a body the core could not read even alone is one: "internal error (...)"). `core`: bodies the
    gpu backend handed to the native core (what libcudf left), `content_core` those of them handed over only
    for their content. `timings`: seconds by stage.
    """

    positions: np.ndarray
    columns: dict[str, pa.Array]
    content: dict[str, pa.Array] | None = None
    content_errors: pa.Array | None = None
    rejected: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    reasons: list[str] = field(default_factory=list)
    fields: list[str | None] = field(default_factory=list)
    reads: int = 0
    core: int = 0
    content_core: int = 0
    timings: dict[str, float] = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def read_bodies(self, bodies: Bodies, plan: Plan) -> BodiesRead:
        """Decide every body of `bodies` but its not-bodies by `plan` (see `BodiesRead`)."""
        ...


def _core_available() -> None:
    problem = native.available()
    if problem:
        raise BackendUnavailable(problem)


def _nothing(plan: Plan) -> BodiesRead:
    read = BodiesRead(np.zeros(0, np.int64), {c.name: pa.nulls(0, c.arrow_type) for c in plan.columns})
    if plan.properties:
        read.content = {p.name: pa.nulls(0, content_arrow_type(p)) for p in plan.properties}
        read.content_errors = pa.nulls(0, pa.string())
    return read


def _merged(plan: Plan, parts: list[BodiesRead]) -> BodiesRead:
    """The reads of parts of a batch as one (positions and rows in the parts' order)."""
    read = BodiesRead(
        np.concatenate([p.positions for p in parts]),
        {c.name: pa.concat_arrays([p.columns[c.name] for p in parts]) for c in plan.columns},
        rejected=np.concatenate([p.rejected for p in parts]),
        reasons=[r for p in parts for r in p.reasons],
        fields=[f for p in parts for f in p.fields],
    )
    if plan.properties:
        read.content = {p.name: pa.concat_arrays([part.content[p.name] for part in parts]) for p in plan.properties}  # type: ignore[index]
        read.content_errors = pa.concat_arrays([part.content_errors for part in parts])  # type: ignore[misc]
    return read


def _by_core(plan: Plan, data: pa.Buffer | bytes, offsets: np.ndarray, positions: np.ndarray) -> BodiesRead:
    """The native core's decision on the bodies `data[offsets[k]:offsets[k + 1]]`, whose input positions are
    `positions` (one call; with the plan's "explain" the core decides every body and every content).

    A call the core cannot finish for its size or its memory is made again in halves, down to one body, which
    alone is an error row saying why (as the JVM's parse step does): one body never costs its batch. A call it
    refuses otherwise (a plan of ours it does not take: a defect) makes all its bodies such error rows."""
    try:
        out = native.read(plan.native, data, offsets)
    except native.CoreFailed as exc:
        if exc.fewer and len(positions) > 1:
            half = len(positions) // 2
            return _merged(
                plan,
                [
                    _by_core(plan, data, offsets[: half + 1], positions[:half]),
                    _by_core(plan, data, offsets[half:], positions[half:]),
                ],
            )
        log.error("the native core could not read %d bodies: %s", len(positions), exc)
        read = _nothing(plan)
        read.rejected = np.asarray(positions, np.int64)
        read.reasons = [f"internal error (the native core could not read this body: {exc}); {REPORT}"] * len(positions)
        read.fields = [None] * len(positions)
        return read
    # The core's own columns follow the plan's columns and properties, by position (native/dspark_core.h): a
    # property may have one of their names ("reason", "verdict", ...), so none is looked up by name.
    own = len(plan.columns) + len(plan.properties)
    ok = native.int8s(out.field(own)) == native.OK
    every = bool(ok.all())
    keep = None if every else pa.array(ok)

    def column(index: int) -> pa.Array:
        array = out.field(index)
        return array if keep is None else array.filter(keep)

    read = BodiesRead(positions[ok], {c.name: column(i) for i, c in enumerate(plan.columns)})
    if not every:
        mask = pa.array(~ok)
        read.rejected = positions[~ok]
        read.reasons = out.field(own + 1).filter(mask).to_pylist()
        read.fields = out.field(own + 2).filter(mask).to_pylist()
    if plan.properties:
        # After verdict, reason and field: content_verdict (every content decided, with "explain"), content_error.
        read.content = {p.name: column(len(plan.columns) + i) for i, p in enumerate(plan.properties)}
        read.content_errors = column(own + 4)
    return read


class NativeBackend:
    """The native core, one pass per body, on the calling thread (one Flink slot = one core)."""

    name = "cpu"

    def __init__(self) -> None:
        _core_available()

    def read_bodies(self, bodies: Bodies, plan: Plan) -> BodiesRead:
        started = time.perf_counter()
        read = _by_core(plan, bodies.data, bodies.offsets, np.arange(len(bodies.raw), dtype=np.int64))
        if len(bodies.not_bodies) and len(read.rejected):
            # Not bodies are b"" in `raw` (the core's "empty body"): `parse_batch` writes their error rows.
            mine = ~np.isin(read.rejected, bodies.not_bodies)
            read.rejected = read.rejected[mine]
            read.reasons = [r for r, m in zip(read.reasons, mine.tolist(), strict=True) if m]
            read.fields = [f for f, m in zip(read.fields, mine.tolist(), strict=True) if m]
        read.timings["read_s"] = time.perf_counter() - started
        return read


# One markdown fence around the whole content (JSON whitespace around it): its body is the JSON.
_FENCE = r"(?s)^[ \t\n\r]*```[A-Za-z]*[ \t]*\r?\n(?P<body>.*?)\r?\n?```[ \t\n\r]*$"
_JSON_LIKE = r"^[ \t\n\r]*[\[{]"


class GpuBackend:
    """A batch reader (libcudf on the GPU; an emulation of it in the tests) over the screened bodies, and the
    native core for what it leaves."""

    name = "gpu"

    def __init__(self, reader: BatchReader | None = None) -> None:
        _core_available()  # what libcudf leaves goes to the core
        if reader is None:
            from connector.parse.libcudf import GpuReader  # raises BackendUnavailable without pylibcudf or a GPU

            reader = GpuReader()
        self.reader = reader

    def read_bodies(self, bodies: Bodies, plan: Plan) -> BodiesRead:
        # Loaded with the gpu backend, not on the cpu backend's start (it imports pyarrow.compute: 25 ms).
        from connector.parse.flatten import flatten

        started = time.perf_counter()
        # Only records that pass the JSON screen go to the reader (`strict`): one object each, within the
        # rules. The rest (also truncated bodies, which would cost a failed read) go to the core.
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
        values, left = flatten(parsed, plan.columns, plan.created_unit)
        content_started = time.perf_counter()
        # The contents of the rows flatten decided (the others go to the core whole anyway).
        keep = ~left
        content: dict[str, pa.Array] = {}
        content_errors = pa.nulls(0, pa.string())
        content_left = np.zeros(int(keep.sum()), bool)
        if plan.properties:
            assert plan.content_column is not None
            contents = values[plan.content_column]
            content, content_errors, content_left, content_reads = _read_contents(
                contents if keep.all() else contents.filter(pa.array(keep)), plan.properties, self.reader
            )
            reads += content_reads
            keep[np.flatnonzero(keep)[content_left]] = False
        core_started = time.perf_counter()
        mask = None if keep.all() else pa.array(keep)
        content_mask = None if not content_left.any() else pa.array(~content_left)

        def kept(array: pa.Array) -> pa.Array:
            return array if mask is None else array.filter(mask)

        def content_kept(array: pa.Array) -> pa.Array:
            return array if content_mask is None else array.filter(content_mask)

        # What libcudf left, in input order: the bodies it did not read, and those whose values or content it
        # did not decide. The not-bodies are left to `parse_batch`.
        unread = np.ones(len(raw), bool)
        unread[good[keep]] = False
        if len(bodies.not_bodies):
            unread[bodies.not_bodies] = False
        to_core = np.flatnonzero(unread)
        if len(to_core):
            lengths = np.diff(bodies.offsets)[to_core]
            offsets = np.zeros(len(to_core) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            by_core = _by_core(plan, b"".join(raw[i] for i in to_core.tolist()), offsets, to_core)
        else:
            by_core = _nothing(plan)
        by_gpu = BodiesRead(good[keep], {c.name: kept(values[c.name]) for c in plan.columns})
        if plan.properties:
            by_gpu.content = {p.name: content_kept(content[p.name]) for p in plan.properties}
            by_gpu.content_errors = content_kept(content_errors)
        read = _merged(plan, [by_gpu, by_core])
        read.reads, read.core, read.content_core = reads, len(to_core), int(content_left.sum())
        read.timings = {
            "screen_s": read_started - started,
            "read_s": flatten_started - read_started,
            "flatten_s": content_started - flatten_started,
            "content_s": core_started - content_started,
            "core_s": time.perf_counter() - core_started,
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


def _read_contents(
    contents: pa.Array, properties: tuple[ContentProperty, ...], reader: BatchReader
) -> tuple[dict[str, pa.Array], pa.Array, np.ndarray, int]:
    """The content columns and `content_error` of the contents the reader decides, a mask of those it leaves
    (to the native core, with their bodies), and the reads made.

    The reader takes the contents that are JSON objects keeping the rules (after one optional ```json fence),
    when no property is of kind "json" (a JSON text of its own, which the reader cannot give back as written);
    a null content is decided here (every property null, no error); free text, and whatever the screen or the
    reader refuses, is left.
    """
    import pyarrow.compute as pc

    n = len(contents)
    contents = contents.cast(pa.string())
    present = native.bools(contents.is_valid())
    left = present.copy()
    columns = {p.name: pa.nulls(n, content_arrow_type(p)) for p in properties}
    reads = 0
    if present.any() and not any(p.kind == "json" for p in properties):
        unfenced = pc.coalesce(pc.struct_field(pc.extract_regex(contents, _FENCE), [0]), contents)
        json_like = native.bools(pc.match_substring_regex(unfenced, _JSON_LIKE))
        candidates = np.flatnonzero(present & json_like & screen(unfenced))
        if len(candidates):
            isolated = read_isolating(
                reader,
                len(candidates),
                joined(unfenced.take(pa.array(candidates)), reader.separator),
                content_read_schema(properties),
                multiline=True,
            )
            reads = isolated.reads
            good = candidates[np.array(isolated.good, dtype=np.int64)]
            if len(good):
                read = pa.concat_tables(isolated.tables).combine_chunks()
                left[good] = False
                # The rows read, in place; the others null (they are left, or null contents).
                at = np.full(n, len(good), np.int64)
                at[good] = np.arange(len(good))
                where = pa.array(at)
                for p in properties:
                    values = pa.concat_arrays([read.column(p.name).chunk(0), pa.nulls(1, content_arrow_type(p))])
                    columns[p.name] = values.take(where)
    return columns, pa.nulls(n, pa.string()), left, reads


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
