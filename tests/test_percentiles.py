"""Recent percentiles are one definition (nearest rank over the last values) run in two places: the JVM's
io.dspark.vllm.request.Recent and Python's connector.flink.metrics.Recent (the Python parse function's gauges,
in its own worker). Both run the cases of tests/data/percentiles.json (RecentTest for the JVM's)."""

from __future__ import annotations

import json
from pathlib import Path

from connector.flink.metrics import Recent

CASES = json.loads((Path(__file__).parent / "data" / "percentiles.json").read_text())["cases"]


def test_the_shared_cases():
    assert len(CASES) >= 5
    for case in CASES:
        recent = Recent(case["capacity"])
        for value in case["values"]:
            recent.add(float(value))
        got = [[p, recent.percentile(p)] for p, _ in case["percentiles"]]
        assert got == case["percentiles"], case["name"]  # whole numbers: a gauge's, as PyFlink exports ints
