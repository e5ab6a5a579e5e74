"""What we change in PyFlink 2.3's Python worker, applied by the functions that need it (pyflink).

- `arrow_results`: a vectorized function may return Arrow, skipping two conversions through pandas. It must be
  in place before PyFlink uses the function, right after unpickling it: `connector.flink.runtime.parse_function`
  (which the parse function's payload calls as it is unpickled) and `connector.flink.sql` apply it.
- `quiet_loopback_exit`: a local program's worker pool stops without a traceback at exit (below).
"""

from __future__ import annotations

from typing import Any

__all__ = ["arrow_results", "quiet_loopback_exit"]


def arrow_results() -> None:
    """Let a vectorized function return its ROW result as an Arrow StructArray instead of a pandas DataFrame.

    PyFlink's Arrow coder converts every result column from pandas to Arrow (`pa.Array.from_pandas` over Python
    objects): about 45 ms per 10,000 parsed bodies, on top of the 50 ms it takes to make the DataFrame from
    the Arrow table the parser already has. With this, a function that returns a `pa.StructArray` hands it to
    the coder as it is (cast to the schema the coder writes); every other result goes the usual way.
    """
    import pyarrow as pa

    modules: list[Any] = []
    for name in ("coder_impl_fast", "coder_impl_slow"):
        try:
            modules.append(__import__(f"pyflink.fn_execution.{name}", fromlist=["pandas_to_arrow"]))
        except ImportError:  # the slow coders where the Cython ones are not built, or no PyFlink worker
            continue
    for module in modules:
        original = module.pandas_to_arrow
        if getattr(original, "_dspark_arrow", False):
            continue

        def pandas_to_arrow(
            schema: Any, timezone: Any, field_types: Any, series: Any, _original: Any = original
        ) -> Any:
            if len(series) == 1 and isinstance(series[0], pa.Array):
                column = series[0]
                target = schema.types[0]
                if column.type != target:
                    column = pa.StructArray.from_arrays(
                        [column.field(i).cast(t.type) for i, t in enumerate(target)], fields=list(target)
                    )
                return pa.RecordBatch.from_arrays([column], schema=schema)
            return _original(schema, timezone, field_types, series)

        pandas_to_arrow._dspark_arrow = True  # type: ignore[attr-defined]
        module.pandas_to_arrow = pandas_to_arrow  # type: ignore[attr-defined]


def quiet_loopback_exit() -> None:
    """Stop PyFlink's local worker pool at exit without starting a thread.

    A PyFlink program that runs its job on the local mini-cluster starts a gRPC server for its Python workers
    (`BeamFnLoopbackWorkerPoolServicer.start`) and registers `server.stop(1)` with `atexit`. A grace period
    makes gRPC start a thread, and Python 3.12 refuses new threads once the interpreter shuts down: every such
    program ended with "RuntimeError: can't create new thread at interpreter shutdown" and its traceback. The
    same start, with `stop(None)` at exit (cancel at once, no thread): the job is over by then. PyFlink starts
    the pool when an environment is created, so `connector.flink.env` applies this when it is imported: a
    program that imports `connector.flink`'s functions before it creates its environments is covered.
    """
    try:
        from pyflink.fn_execution.beam import beam_worker_pool_service as pool
    except ImportError:
        return
    servicer = pool.BeamFnLoopbackWorkerPoolServicer
    if getattr(servicer.start, "_dspark_quiet_exit", False):
        return

    def start(self: Any) -> str:
        if not self._worker_address:
            server = pool.grpc.server(pool.thread_pool_executor.shared_unbounded_instance())
            address = f"localhost:{server.add_insecure_port('[::]:0')}"
            pool.beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(self, server)
            server.start()
            self._worker_address = address
            pool.atexit.register(pool.functools.partial(server.stop, None))
        return str(self._worker_address)

    start._dspark_quiet_exit = True  # type: ignore[attr-defined]
    servicer.start = start  # type: ignore[method-assign]
