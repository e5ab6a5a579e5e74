"""A fix for PyFlink 2.3's Python `AsyncScalarFunction`, applied on the Python workers (pyflink).

PyFlink 2.3 decodes each input row into ONE list that its fast coder reuses for every row
(`FlattenRowCoderImpl._reuse_flatten_row` in `coder_impl_fast.pyx`), and `AsyncScalarFunctionOperation`
hands that list to `eval` later, on its event loop: by then later rows have overwritten it, so `eval` sees
the wrong arguments. Measured: datagen 0..99 -> an async function returning its argument gave 73 of 100
rows with another row's value (some twice, some never). `tests/test_flink_sql.py` keeps the check.

The fix copies the row before the operation keeps it. It must be in place before PyFlink binds the
operation's `process_element`, which it does right after unpickling the function: `connector.flink.runtime`
imports this module, and the function's pickle imports `connector.flink.runtime`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["copy_async_scalar_inputs"]


def copy_async_scalar_inputs() -> None:
    try:
        from pyflink.fn_execution.table.async_function import operations
    except ImportError:  # not on a Python worker of PyFlink 2.3+
        return
    original = operations.AsyncScalarFunctionOperation.process_element
    if getattr(original, "_dspark_copies_inputs", False):
        return

    def process_element(self: Any, value: Any) -> Any:
        return original(self, list(value))

    process_element._dspark_copies_inputs = True  # type: ignore[attr-defined]
    operations.AsyncScalarFunctionOperation.process_element = process_element  # type: ignore[method-assign]
