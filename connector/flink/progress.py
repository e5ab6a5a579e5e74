"""Progress of a running job from Flink's REST API: bodies in, rows out, errors (pure code, urllib only).

Our parse function reports the metrics `dspark.numRecordsIn`, `dspark.numRecordsOut`,
`dspark.numRecordsInErrors` (bodies, rows, error rows), summed over subtasks with the REST API's `agg=sum`.
What a job wrote is not here: a writer chained to the operator before it shows no records of its own, and a
vertex's counts are named by Flink, not by the table (jobs/features.py counts the rows its files hold). The
REST API serves metrics at most as often as `metrics.fetcher.update-interval` (10 s by default): a job that
reports more often sets it to its interval, or sees the same numbers twice.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["JobProgress", "Snapshot", "free_port"]

_PARSE_METRICS = {"numRecordsIn": "bodies", "numRecordsOut": "rows", "numRecordsInErrors": "rejected"}


@dataclass(frozen=True)
class Snapshot:
    bodies: int = 0
    rows: int = 0
    rejected: int = 0

    def line(self) -> str:
        return f"bodies in {self.bodies}  rows {self.rows}  rejected {self.rejected}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JobProgress:
    """Polls `http://127.0.0.1:<port>` for the job's counters; `snapshot()` is safe to call any time."""

    def __init__(self, rest_url: str, job_id: str) -> None:
        self.rest_url = rest_url.rstrip("/")
        self.job_id = job_id
        self.last = Snapshot()
        self.fresh = False

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.rest_url + path, timeout=5) as response:
            return json.load(response)

    def snapshot(self) -> Snapshot:
        """The counters now; when they cannot be read (the job is starting, or over and its mini-cluster gone),
        the last ones read, and `fresh` is False."""
        self.fresh = False
        try:
            job = self._get(f"/jobs/{self.job_id}")
            totals = {"bodies": 0, "rows": 0, "rejected": 0}
            for vertex in job["vertices"]:
                base = f"/jobs/{self.job_id}/vertices/{vertex['id']}/subtasks/metrics"
                names = [m["id"] for m in self._get(base)]
                wanted = {}
                for name in names:
                    for metric, key in _PARSE_METRICS.items():
                        if name.endswith(f".dspark.{metric}"):
                            wanted[name] = key
                if not wanted:
                    continue
                query = urllib.parse.urlencode({"get": ",".join(wanted), "agg": "sum"})
                for metric in self._get(f"{base}?{query}"):
                    totals[wanted[metric["id"]]] += int(float(metric.get("sum", 0)))
            self.last = Snapshot(**totals)
            self.fresh = True
        except Exception:  # the job may be starting or finished: keep the last numbers
            pass
        return self.last

    def every(self, seconds: float, report: Callable[[Snapshot], None]) -> threading.Event:
        """Report a snapshot every `seconds` in a daemon thread until the returned event is set."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(seconds):
                report(self.snapshot())

        threading.Thread(target=loop, daemon=True, name="dspark-progress").start()
        return stop
