"""The vectorized parse function: batches of raw bodies -> flat typed columns, and its metrics (pyflink).

Built on the workers by `connector.flink.runtime.parse_function` from a table's plan; `connector.flink.sql`'s
`parse_<profile>` SQL functions (`SqlParseFunction`) are the same step over any table's bodies.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyflink.table.udf import FunctionContext, ScalarFunction

from connector.flink.device import choose_device
from connector.flink.frames import INTERNAL, flat_schema, prune_profile, to_table
from connector.flink.metrics import Recent
from connector.options import MODE, PARSE_BACKEND, PARSE_GPU_DEVICE
from connector.parse import parse_batch
from connector.plan.parse_function import ParseFunctionPlan
from connector.profiles import Profile

__all__ = ["ParseFunction"]

log = logging.getLogger(__name__)
_GPU_SAID = False  # 'auto' took the GPU in this worker (a process): said once


class ParseFunction(ScalarFunction):
    """Called with (body BYTES, source_line BIGINT) in replay mode, (body BYTES, request_error STRING) in request
    mode, per Arrow batch: `source_line` is a replayed body's line in its file (the source counts them); a
    response's line is its number in this subtask.
    Metrics: see `connector.flink.metrics` (`backendGpu` is 1 where the GPU parses, `backendJvm` 0: the route
    this subtask took; `gpuFallbackBatches` counts the batches 'auto' parsed on the CPU).
    """

    def __init__(
        self,
        profile: Profile,
        columns: tuple[str, ...],
        *,
        backend: str = "auto",
        gpu_device: str = "auto",
        require_created: bool = False,
        mode: str = "replay",
    ):
        internal = set(INTERNAL.names)
        self.columns = columns
        self.profile = prune_profile(profile, [c for c in columns if c not in internal])
        self.backend = backend
        self.gpu_device = gpu_device
        self.require_created = require_created
        self.mode = mode
        unknown = set(columns) - set(flat_schema(self.profile).names)
        if unknown:
            raise ValueError(f"the parse function cannot produce {sorted(unknown)}")

    @classmethod
    def of_table(cls, plan: ParseFunctionPlan, columns: tuple[str, ...]) -> ParseFunction:
        """The parse step of a 'dspark-vllm' table, from its plan."""
        o = plan.options
        return cls(
            plan.profile,
            columns,
            backend=o.get(PARSE_BACKEND),
            gpu_device=o.get(PARSE_GPU_DEVICE),
            require_created=plan.require_created,
            mode=o.get(MODE),
        )

    def open(self, function_context: FunctionContext) -> None:
        self._responses = 0
        self._last_created: int | None = None  # ms: the newest event time so far
        self._last_ms = 0.0
        self._gpu = 0
        if self.backend != "cpu":
            device = choose_device(
                self.gpu_device, _subtask_index(function_context), os.environ.get("CUDA_VISIBLE_DEVICES")
            )
            if device is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = device
        # 'auto' is decided here, where the function runs: libcudf where this worker has the GPU backend, else
        # the native core (`select_backend`: whatever stops the GPU backend, said in one WARNING a worker); the
        # batches it parses on the CPU count in the metric gpuFallbackBatches.
        self._effective = self.backend
        if self.backend == "auto":
            self._effective = _auto_backend()
        self._gpu = 1 if self._effective == "gpu" else 0
        group = function_context.get_metric_group().add_group("dspark")
        self._bodies = group.counter("numRecordsIn")
        self._rows = group.counter("numRecordsOut")
        self._rejected = group.counter("numRecordsInErrors")
        self._bytes = group.counter("numBytesIn")
        self._batches = group.counter("numBatches")
        self._fallbacks = group.counter("gpuFallbackBatches")
        self._in_rate = group.meter("numRecordsInPerSecond", time_span_in_seconds=60)
        self._out_rate = group.meter("numRecordsOutPerSecond", time_span_in_seconds=60)
        self._parse_times = Recent(100)
        group.gauge("parseTimeMsP50", lambda: self._parse_times.percentile(50))
        group.gauge("parseTimeMsP99", lambda: self._parse_times.percentile(99))
        group.gauge("lastBatchParseTimeMs", lambda: int(self._last_ms))
        group.gauge("backendGpu", lambda: int(self._gpu))
        group.gauge("backendJvm", lambda: 0)

    def eval(self, body: pd.Series, more: pd.Series) -> pa.StructArray:
        """The batch's rows as Arrow, in the order of `columns` (PyFlink takes it as it is: `arrow_results`)."""
        count = len(body)
        started = time.perf_counter()
        result = parse_batch(list(body), self.profile, backend=self._effective, inline_errors=True)
        elapsed_ms = (time.perf_counter() - started) * 1000.0

        # A failed request has no `created`: it happened now (servers set `created` to now too).
        if self.mode == "request":
            lines = np.arange(self._responses + 1, self._responses + count + 1, dtype=np.int64)
            self._responses += count
            now, errors = int(time.time() * 1000), more
        else:
            lines, now, errors = more.to_numpy(dtype=np.int64), None, None
        table = to_table(result, count, lines, self._last_created, errors, self.require_created, now)
        if "created" in table.column_names and count:
            newest = pc.max(table.column("created").cast(pa.int64())).as_py()
            if newest is not None and (self._last_created is None or newest > self._last_created):
                self._last_created = newest
        columns = [table.column(name).combine_chunks() for name in self.columns]
        rows = pa.StructArray.from_arrays(columns, names=list(self.columns))

        rejected = count - table.column("_error").null_count
        self._rows.inc(count - rejected)
        self._rejected.inc(rejected)
        self._bodies.inc(count)  # last: whoever reads numRecordsIn finds its bodies counted as rows or errors
        self._bytes.inc(int(body.map(len, na_action="ignore").sum()) if count else 0)
        self._batches.inc(1)
        self._in_rate.mark_event(count)
        self._out_rate.mark_event(count - rejected)
        self._parse_times.add(elapsed_ms)
        self._last_ms = elapsed_ms
        self._gpu = 1 if result.backend == "gpu" else 0
        if self.backend == "auto" and result.backend != "gpu":
            self._fallbacks.inc(1)
        return rows


def _auto_backend() -> str:
    """The backend 'auto' takes in this worker, said in one line a worker: the CPU's line is `select_backend`'s
    WARNING with its reason; the GPU's is this one."""
    global _GPU_SAID
    from connector.parse.backends import select_backend

    name = select_backend("auto")[0].name
    if name == "gpu" and not _GPU_SAID:
        _GPU_SAID = True
        log.info("parse backend 'auto' uses the GPU: this worker has the GPU backend (pylibcudf and a GPU)")
    return name


def _subtask_index(context: FunctionContext) -> int:
    index = context.get_index_of_this_subtask()  # PyFlink >= 2.3; None where the runtime does not say
    return int(index) if index is not None else 0
