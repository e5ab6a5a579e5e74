"""The metrics of our functions, named as Flink names its own (FLIP-33), and recent percentiles (pyflink-free).

Group `dspark` of each operator:

- parse: counters `numRecordsIn` (bodies), `numRecordsOut` (parsed rows), `numRecordsInErrors` (error rows),
  `numBytesIn`, `numBatches`, `gpuFallbackBatches`; meters `numRecordsInPerSecond`, `numRecordsOutPerSecond`;
  gauges `parseTimeMsP50`, `parseTimeMsP99` (the last 100 batches), `lastBatchParseTimeMs`, the route this
  subtask took: `backendGpu` (1: libcudf parses), `backendJvm` (1: the native core in the JVM, 0: the Python
  worker), `gpuUnused` (1: 'auto' in the JVM on a TaskManager with a GPU).
- request, registered on the JVM by `io.dspark.vllm.engine.RequestStep`: counters `numRequests`, `numResponses`
  (a body came back), `numRequestsFailed`, `numRetries`, `numBytesIn`; meter `numResponsesPerSecond`; gauges
  `inFlight`, `concurrencyLimit`, `numThrottled`, `latencyMsP50`, `latencyMsP95`, `latencyMsP99` (the last
  1,000 requests); with 'request.store': `numAnsweredFromStore`, `numAnsweredFromCache`, `numTokensSaved`,
  `numStored`, `numStoreFailures`, `storePutMsP50`, `storePutMsP99` (the last 1,000 puts).
- each replica of the endpoint, in the request step's group `replica` = its name (`host:port`, `host:port/path`
  where base URLs differ in their path only, or `host:port/address` for an address of a host name): gauges
  `inFlight`, `concurrencyLimit`, `ejected` (1 while it gets no requests), `numAnswers` (2xx), `numThrottled`
  (429/503), `latencyMsP50` (its last 1,000 answers).

Gauges are numbers (PyFlink exports gauges of ints): percentiles are whole milliseconds. Flink's Prometheus
reporter shows a meter as its rate.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["GROUP", "PARSE_METRICS", "REPLICA_GROUP", "REPLICA_METRICS", "REQUEST_METRICS", "Recent"]

# The metrics' names, declared once: the Python parse function registers PARSE_METRICS by these names, and the
# jar by the constants generated from them (`io.dspark.vllm.plan.PlanContract`, connector.plan.contract).
GROUP = "dspark"
PARSE_METRICS: tuple[str, ...] = (
    "numRecordsIn", "numRecordsOut", "numRecordsInErrors", "numBytesIn", "numBatches", "gpuFallbackBatches",
    "numRecordsInPerSecond", "numRecordsOutPerSecond", "parseTimeMsP50", "parseTimeMsP99", "lastBatchParseTimeMs",
    "backendGpu", "backendJvm", "gpuUnused",
)  # fmt: skip
REQUEST_METRICS: tuple[str, ...] = (
    "numRequests", "numResponses", "numRequestsFailed", "numRetries", "numBytesIn", "numResponsesPerSecond",
    "inFlight", "concurrencyLimit", "numThrottled", "latencyMsP50", "latencyMsP95", "latencyMsP99",
    "numAnsweredFromStore", "numAnsweredFromCache", "numTokensSaved", "numStored", "numStoreFailures",
    "storePutMsP50", "storePutMsP99",
)  # fmt: skip
REPLICA_GROUP = "replica"
REPLICA_METRICS: tuple[str, ...] = (
    "inFlight", "concurrencyLimit", "ejected", "numAnswers", "numThrottled", "latencyMsP50",
)  # fmt: skip


class Recent:
    """The last `size` values and their percentiles (nearest rank), for numeric gauges: the JVM's
    io.dspark.vllm.request.Recent in the Python parse function's worker, whole numbers; both are held to the cases
    of tests/data/percentiles.json.

    >>> r = Recent(4)
    >>> for v in (10, 20, 30, 40, 50): r.add(v)
    >>> r.percentile(50), r.percentile(100)
    (30, 50)
    """

    def __init__(self, size: int) -> None:
        self._values: deque[float] = deque(maxlen=size)

    def add(self, value: float) -> None:
        self._values.append(value)

    def percentile(self, p: float) -> int:
        if not self._values:
            return 0
        ordered = sorted(self._values)
        rank = max(1, math.ceil(p / 100.0 * len(ordered)))
        return int(round(ordered[rank - 1]))
