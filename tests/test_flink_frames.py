"""Pure parts of the Flink layer: full-length frames, pruned profiles, GPU choice (no Flink job)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from connector.decode import parse_batch
from connector.flink.frames import flat_schema, prune_profile, to_frame
from connector.flink.gpu import choose_device
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
    result = parse_batch(bodies, profile, backend="cpu", first_line=0)
    frame = to_frame(result, len(bodies), np.arange(1, 6), pd.Timestamp(5, unit="s"))
    assert list(frame["id"]) == ["c0", None, "c2", None, "c4"]
    assert frame["_error"].notna().tolist() == [False, True, False, True, False]
    assert list(frame["_line"]) == [1, 2, 3, 4, 5]
    # A rejected row gets the newest event time of the rows BEFORE it: it neither moves the watermark past
    # the rows after it (they would be late) nor is late itself.
    assert list(frame["created"]) == [pd.Timestamp(1_700_000_000 + i, unit="s") for i in (0, 0, 2, 2, 4)]
    assert list(frame["answer"]) == ["42", None, "42", None, "42"]
    assert set(frame["_backend"]) == {"cpu"}
    # PyFlink's own conversion of each column into the declared Arrow type must accept the frame.
    for field in flat_schema(profile):
        column = frame[field.name]
        target = pa.timestamp("ms") if pa.types.is_timestamp(field.type) else field.type
        pa.Array.from_pandas(column, mask=column.isnull(), type=target)


@pytest.mark.parametrize(
    ("newest_before", "expected"), [(None, pd.Timestamp(0)), (pd.Timestamp(7, unit="s"), pd.Timestamp(7, unit="s"))]
)
def test_a_rejected_first_body_gets_the_time_before_the_batch(newest_before, expected):
    result = parse_batch([b"nope", body(1)], "openai", backend="cpu", first_line=0)
    frame = to_frame(result, 2, np.arange(2), newest_before)
    assert list(frame["created"]) == [expected, pd.Timestamp(1_700_000_001, unit="s")]


def test_request_mode_failures_happen_now():
    result = parse_batch([b"", body(1)], "openai", backend="cpu", first_line=0)
    now = pd.Timestamp("2026-01-01 00:00:00")
    frame = to_frame(result, 2, np.arange(2), None, ["timed out", None], now=now)
    assert list(frame["created"]) == [now, pd.Timestamp(1_700_000_001, unit="s")]


def test_request_errors_and_missing_created_become_error_rows():
    no_created = json.loads(body(1))
    del no_created["created"]
    bodies = [body(0), json.dumps(no_created).encode()]
    result = parse_batch(bodies, "openai", backend="cpu", first_line=0)
    frame = to_frame(result, 2, np.arange(2), None, ["timed out", None], require_created=True)
    assert frame.loc[0, "_error"] == "request failed: timed out"
    if result.errors.num_rows == 0:  # a body without created parses; the watermark still needs one
        assert "created" in frame.loc[1, "_error"]
        assert frame.loc[1, "_error_field"] == "created"


def test_pruned_profile_parses_only_what_is_declared():
    profile = prune_profile(load_profile("coder"), {"usage", "prompt_tokens", "language"})
    names = flat_schema(profile).names
    assert {"prompt_tokens", "language", "content"} <= set(names)
    assert {"id", "created", "model", "completion_tokens", "code", "reasoning"}.isdisjoint(names)
    result = parse_batch([body(3)], profile, backend="cpu", first_line=0)
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
