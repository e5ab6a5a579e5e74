"""PyFlink 2.3's AsyncScalarFunction and our fix (connector/flink/pyflink_fixes.py), in real PyFlink jobs.

datagen 0..99 -> an async function returning its argument -> a file. Without the fix PyFlink hands `eval` a
row its coder has already overwritten; with it every row gets its own argument. If the first test starts to
fail, PyFlink has fixed the bug and the fix can go.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyflink")

import cloudpickle  # noqa: E402
from pyflink.table import DataTypes, EnvironmentSettings, TableEnvironment  # noqa: E402
from pyflink.table.udf import AsyncScalarFunction, udf  # noqa: E402

pytestmark = [pytest.mark.flink, pytest.mark.slow]
N = 100


class Echo(AsyncScalarFunction):
    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed

    def __setstate__(self, state: dict) -> None:
        # Unpickled on the worker before PyFlink binds the operation's process_element: the moment the
        # connector's own functions apply the fix (by importing connector.flink.runtime).
        self.__dict__.update(state)
        if self.fixed:
            from connector.flink.pyflink_fixes import copy_async_scalar_inputs

            copy_async_scalar_inputs()

    async def eval(self, n: int) -> str:
        await asyncio.sleep(0.005)
        return str(n)


cloudpickle.register_pickle_by_value(sys.modules[__name__])


def mismatches(tmp_path: Path, fixed: bool) -> int:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = t_env.get_config()
    config.set("parallelism.default", "1")
    config.set("python.executable", sys.executable)
    t_env.execute_sql(
        "CREATE TABLE numbers (n BIGINT) WITH ('connector' = 'datagen', 'fields.n.kind' = 'sequence', "
        f"'fields.n.start' = '0', 'fields.n.end' = '{N - 1}', 'rows-per-second' = '1000')"
    )
    out = tmp_path / ("fixed" if fixed else "plain")
    t_env.execute_sql(
        f"CREATE TABLE sink_echo (n BIGINT, echoed STRING) WITH ('connector' = 'filesystem', 'path' = '{out}', "
        "'format' = 'csv')"
    )
    t_env.create_temporary_function("echo", udf(Echo(fixed), result_type=DataTypes.STRING()))
    t_env.execute_sql("INSERT INTO sink_echo SELECT n, echo(n) FROM numbers").wait()
    rows = [line.split(",") for f in out.rglob("part-*") for line in f.read_text().splitlines()]
    assert len(rows) == N
    return sum(1 for n, echoed in rows if n != echoed)


def test_pyflink_async_scalar_function_hands_eval_a_reused_row(tmp_path):
    assert mismatches(tmp_path, fixed=False) > 0


def test_the_fix_gives_every_row_its_own_arguments(tmp_path):
    assert mismatches(tmp_path, fixed=True) == 0
