"""Public test helpers: a simulator on 127.0.0.1, on a free port, for the length of a `with` block.

    >>> from connector.simulator.testing import serve_simulator
    >>> with serve_simulator(profiles=("coder",), seed=7) as sim:
    ...     sim.url.startswith("http://127.0.0.1:")
    True

`mode="thread"` (default) runs it on an event loop in a background thread of this process: `sim.simulator`
is the live `Simulator` (its `stats`, `reconfigure(...)`). `mode="process"` runs `python -m
connector.simulator` in a subprocess (no GIL shared with the code under test: use it for benchmarks and
Flink jobs); `stats()` then reads `/metrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import ssl
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from connector.simulator.cli import config_to_args
from connector.simulator.server import Simulator, SimulatorConfig

__all__ = ["RunningSimulator", "serve_simulator"]

_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class RunningSimulator:
    url: str  # http://127.0.0.1:PORT, the server root (clients append /v1/...)
    host: str
    port: int
    simulator: Simulator | None  # the live object in thread mode, None in process mode
    process: subprocess.Popen[str] | None = None

    def stats(self) -> dict[str, float]:
        """Counters: `requests /v1/chat/completions`, `status_200`, `fault 429`, `throttled` (429s of the
        capacity), `connections_total`, `in_flight_max`, ... (read live in thread mode, from /metrics in
        process mode)."""
        if self.simulator is not None:
            return {k: float(v) for k, v in self.simulator.stats.items()}
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            return parse_metrics(response.read().decode())


def parse_metrics(text: str) -> dict[str, float]:
    """The simulator's /metrics as the same keys `Simulator.stats` uses."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'dspark_sim_(\w+?)(?:\{(\w+)="([^"]*)"\})? (\S+)$', line)
        if not m:
            continue
        name, label, value, number = m.groups()
        key = {
            "requests_total": f"requests {value}",
            "responses_total": f"status_{value}",
            "faults_total": f"fault {value}",
            "throttled_total": "throttled",
        }.get(name, name)
        out[key] = float(number)
    return out


@contextlib.contextmanager
def serve_simulator(
    config: SimulatorConfig | None = None,
    *,
    mode: Literal["thread", "process"] = "thread",
    ssl_context: ssl.SSLContext | None = None,
    workers: int = 1,
    port: int = 0,
    **changes: Any,
) -> Iterator[RunningSimulator]:
    """Start a simulator (`config`, with `changes` applied: `profiles=("vl",)`, `faults={"429": 0.1}`).

    With `ssl_context` (thread mode) it serves HTTPS and `url` starts with https://. `workers` > 1 (process
    mode) runs that many server processes on the port; `stats()` then shows whichever answered /metrics.
    `port`: 0 for a free one; a given port lets a test stop a server and start another where it was."""
    config = replace(config or SimulatorConfig(), **changes)
    if workers != 1 and mode != "process":
        raise ValueError("workers > 1 needs mode='process'")
    if mode == "process":
        if ssl_context is not None:
            raise ValueError("ssl_context needs mode='thread'")
        with _in_process(config, workers, port) as running:
            yield running
        return
    loop = asyncio.new_event_loop()
    sim = Simulator(config)
    address = loop.run_until_complete(sim.start("127.0.0.1", port, ssl=ssl_context))
    thread = threading.Thread(target=loop.run_forever, name="dspark-vllm-simulator", daemon=True)
    thread.start()
    try:
        scheme = "https" if ssl_context is not None else "http"
        yield RunningSimulator(f"{scheme}://127.0.0.1:{address[1]}", "127.0.0.1", address[1], sim)
    finally:
        asyncio.run_coroutine_threadsafe(sim.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        # Tasks still pending (a hang fault) are dropped with the loop.
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


@contextlib.contextmanager
def _in_process(config: SimulatorConfig, workers: int = 1, port: int = 0) -> Iterator[RunningSimulator]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    env.pop("DSPARK_SIM_API_KEY", None)
    if config.api_key:
        env["DSPARK_SIM_API_KEY"] = config.api_key
    cmd = [
        sys.executable,
        "-m",
        "connector.simulator",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *config_to_args(config),
    ]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"http://([\d.]+):(\d+)", line)
        if not m:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise RuntimeError(f"the simulator did not start: {line.strip()} {err.strip()}")
        host, port = m.group(1), int(m.group(2))
        yield RunningSimulator(f"http://{host}:{port}", host, port, None, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
