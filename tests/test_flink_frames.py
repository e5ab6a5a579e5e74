"""Pure parts of the Flink layer: full-length frames, pruned profiles, GPU choice (no Flink job)."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from connector.flink.device import choose_device
from connector.flink.frames import flat_schema, prune_profile, to_table
from connector.parse import parse_batch
from connector.profiles import load_profile


def body(i: int) -> bytes:
    return json.dumps(
        {
            "id": f"c{i}",
            "object": "chat.completion",
            "created": 1_700_000_000 + i,
            "model": "m",
            "choices": [{"index": 0, "message": {"content": '{"answer": "42"}'}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": i, "completion_tokens": 1, "total_tokens": i + 1},
        }
    ).encode()


def test_frame_has_one_row_per_body_in_order():
    bodies = [body(0), b"nope", body(2), b'{"error": {"message": "x", "type": "t", "code": 500}}', body(4)]
    profile = load_profile("math")
    result = parse_batch(bodies, profile, backend="cpu", inline_errors=True)
    table = to_table(result, len(bodies), np.arange(1, 6), 5000)
    assert table.column("id").to_pylist() == ["c0", None, "c2", None, "c4"]
    assert [r is not None for r in table.column("_error").to_pylist()] == [False, True, False, True, False]
    assert table.column("_line").to_pylist() == [1, 2, 3, 4, 5]
    # A rejected row gets the newest event time of the rows BEFORE it: it neither moves the watermark past
    # the rows after it (they would be late) nor is late itself.
    assert seconds(table) == [1_700_000_000 + i for i in (0, 0, 2, 2, 4)]
    assert table.column("answer").to_pylist() == ["42", None, "42", None, "42"]
    assert set(table.column("_backend").to_pylist()) == {"cpu"}
    assert table.schema.names == flat_schema(profile).names
    table.validate(full=True)


def seconds(table: pa.Table) -> list[int]:
    return [t.timestamp() for t in table.column("created").to_pylist()]


@pytest.mark.parametrize(("newest_before", "expected"), [(None, 0), (7000, 7)])
def test_a_rejected_first_body_gets_the_time_before_the_batch(newest_before, expected):
    result = parse_batch([b"nope", body(1)], "openai", backend="cpu", inline_errors=True)
    table = to_table(result, 2, np.arange(2), newest_before)
    assert seconds(table) == [expected, 1_700_000_001]


def test_request_mode_failures_happen_now():
    result = parse_batch([b"", body(1)], "openai", backend="cpu", inline_errors=True)
    now = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC
    table = to_table(result, 2, np.arange(2), None, ["timed out", None], now_ms=now)
    assert seconds(table) == [now // 1000, 1_700_000_001]


def test_request_errors_and_missing_created_become_error_rows():
    no_created = json.loads(body(1))
    del no_created["created"]
    bodies = [body(0), json.dumps(no_created).encode()]
    result = parse_batch(bodies, "openai", backend="cpu", inline_errors=True)
    table = to_table(result, 2, np.arange(2), None, ["timed out", None], require_created=True)
    assert table.column("_error").to_pylist()[0] == "request failed: timed out"
    assert table.column("_error").to_pylist()[1] == "no 'created' in the body: the table's WATERMARK needs it"
    assert table.column("_error_field").to_pylist() == [None, "created"]


def test_pruned_profile_parses_only_what_is_declared():
    profile = prune_profile(load_profile("coder"), {"usage", "prompt_tokens", "language"})
    names = flat_schema(profile).names
    assert {"prompt_tokens", "language", "content"} <= set(names)
    assert {"id", "created", "model", "completion_tokens", "code", "reasoning"}.isdisjoint(names)
    result = parse_batch([body(3)], profile, backend="cpu", inline_errors=True)
    assert result.table.column("prompt_tokens").to_pylist() == [3]


@pytest.mark.parametrize(
    ("setting", "subtask", "visible", "expected"),
    [
        ("auto", 0, None, None),
        ("auto", 5, "3", None),
        ("auto", 5, "0,1,2,3", "1"),
        ("auto", 2, "4, 6", "4"),
        ("1", 0, "4,6", "6"),
        ("2", 0, None, "2"),
    ],
)
def test_gpu_device_choice(setting, subtask, visible, expected):
    assert choose_device(setting, subtask, visible) == expected


def test_an_arrow_result_goes_to_pyflinks_coder_as_it_is():
    from pyflink.fn_execution import coder_impl_fast

    from connector.flink.pyflink_fixes import arrow_results

    arrow_results()
    arrow_results()  # twice is once
    target = pa.struct([("error", pa.string()), ("created", pa.timestamp("ms")), ("n", pa.int64())])
    schema = pa.schema([pa.field("f0", target)])
    ours = pa.StructArray.from_arrays(
        [pa.array([None, "bad"]), pa.array([1000, 2000], pa.timestamp("ms", tz="UTC")), pa.array([1, None])],
        names=["_error", "created", "n"],
    )
    batch = coder_impl_fast.pandas_to_arrow(schema, "UTC", [None], [ours])
    assert batch.schema == schema
    assert batch.column(0).to_pylist()[1] == {"error": "bad", "created": datetime(1970, 1, 1, 0, 0, 2), "n": None}
    # Anything else still goes through pandas.
    frame = pd.DataFrame({"error": ["x"], "created": [pd.Timestamp(0)], "n": [3]})
    assert coder_impl_fast.pandas_to_arrow(schema, "UTC", [None], [frame]).column(0).to_pylist()[0]["n"] == 3


def test_a_batch_that_reads_no_profile_column_keeps_its_rows():
    # A query that reads only 'error.reason': the parse step runs with the profile pruned to nothing.
    profile = prune_profile(load_profile("coder"), set())
    result = parse_batch([body(0), b"nope", body(2)], profile, backend="cpu", inline_errors=True)
    table = to_table(result, 3, np.arange(1, 4), None)
    assert table.num_rows == 3 and table.column_names == ["_line", "_error", "_error_field", "_backend"]
    assert [e is None for e in table.column("_error").to_pylist()] == [True, False, True]


@pytest.mark.parametrize("gpu_backend", [False, True], ids=["cpu-worker", "gpu-worker"])
def test_auto_in_the_parse_function_picks_at_open_says_it_once_a_worker_and_shows_it(monkeypatch, caplog, gpu_backend):
    """'auto' on the Python route is decided at open where the function runs: libcudf where this worker has the
    GPU backend (emulated here), else the native core; one line a worker says which and why, and each subtask's
    gauges show its route from the start (`backendGpu`, `backendJvm` 0), its CPU batches counted."""
    pytest.importorskip("pyflink")
    from apache_beam.metrics.execution import MetricsContainer
    from apache_beam.runners.worker import statesampler
    from apache_beam.utils.counters import CounterFactory
    from pyflink.fn_execution.metrics.process.metric_impl import GenericMetricGroup
    from pyflink.table.udf import FunctionContext

    from connector.flink import functions
    from connector.parse import backends

    if gpu_backend:
        from tests.libcudf_emulator import EmulatedLibcudfReader

        monkeypatch.setattr(backends, "_gpu", lambda: backends.GpuBackend(EmulatedLibcudfReader()))
    backends._auto.cache_clear()  # a fresh worker: its first open decides
    monkeypatch.setattr(functions, "_GPU_SAID", False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # open points CUDA at its device: kept to this test
    # PyFlink's own metric group over Beam's metrics, as in a Python worker (its counters count in this state).
    sampler = statesampler.StateSampler("parse", CounterFactory())
    statesampler.set_current_tracker(sampler)
    try:
        with sampler.scoped_state("parse", "process", metrics_container=MetricsContainer("parse")):
            groups = []
            with caplog.at_level("INFO"):
                for index in (0, 1):  # two subtasks in one worker
                    function = functions.ParseFunction(load_profile("coder"), ("id", "_line", "_error"), backend="auto")
                    group = GenericMetricGroup(None, None).add_group(f"subtask-{index}")  # its own metrics
                    function.open(FunctionContext(group, {}, index_of_this_subtask=index))
                    gauges = group.add_group("dspark")._flink_gauge
                    assert (gauges["backendGpu"](), gauges["backendJvm"]()) == (int(gpu_backend), 0)
                    function.eval(pd.Series([body(1), body(2)]), pd.Series([1, 2]))
                    groups.append((function, gauges))
            said = [r.getMessage() for r in caplog.records if "parse backend 'auto'" in r.getMessage()]
            assert len(said) == 1, said
            assert ("uses the GPU" if gpu_backend else "uses the CPU") in said[0]
            for function, gauges in groups:
                assert gauges["backendGpu"]() == int(gpu_backend)
                assert function._fallbacks.get_count() == (0 if gpu_backend else 1)
    finally:
        statesampler.set_current_tracker(None)
