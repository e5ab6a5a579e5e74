"""Helpers for the tests that drive a standalone Flink cluster (jobs/standalone_cluster.sh) over its REST API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "jobs" / "standalone_cluster.sh"
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout: float, every: float = 0.5) -> T:
    """`check()`'s first truthy value; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def rest(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as response:
        return json.load(response)


def wait_for_job_end(base: str, job: str, timeout: float) -> str:
    """The final state of `job` (FINISHED, FAILED or CANCELED) from the REST API at `base`."""
    return wait_for(
        f"job {job} to end",
        lambda: (s := rest(base, f"/jobs/{job}")["state"]) in ("FINISHED", "FAILED", "CANCELED") and s,
        timeout=timeout,
        every=1.0,
    )


def cluster_script(tmp_path: Path) -> Callable[..., str]:
    """jobs/standalone_cluster.sh for a cluster under `tmp_path` that runs jobs/responses.py, detached: call
    it with the script's arguments (and variables of its own); it returns what the script printed and fails the
    test if it failed."""
    env = {
        **os.environ,
        "DSPARK_PYTHON": sys.executable,
        "DSPARK_CLUSTER_DIR": str(tmp_path / "cluster"),
        "DSPARK_JOB": str(ROOT / "jobs" / "responses.py"),
        "DSPARK_DETACHED": "1",
    }

    def script(*args: str, timeout: float = 180, **more: str) -> str:
        run = subprocess.run([str(SCRIPT), *args], env={**env, **more}, capture_output=True, text=True, timeout=timeout)
        assert run.returncode == 0, f"{args}: {run.stdout[-3000:]}{run.stderr[-3000:]}"
        return run.stdout + run.stderr

    return script
