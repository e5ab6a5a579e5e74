#!/usr/bin/env bash
# One-shot submission of the feature job to the compose cluster (the `submit` service).
#
# Waits until the JobManager has at least one TaskManager and the model endpoint answers
# /v1/models (vLLM may spend minutes downloading and loading the model), then replaces itself
# with `flink run ... -py jobs/features.py`, attached, so the container ends with the job.
#
# Settings (environment, defaults in .env / docker-compose.yml):
#   FLINK_JOBMANAGER     host:port of the JobManager's REST endpoint   (jobmanager:8081)
#   DSPARK_ENDPOINT      base URL of the OpenAI-compatible server      (http://vllm:8000)
#   DSPARK_JOB           the job script                                (/opt/flink/usrlib/features.py)
#   DSPARK_OUTPUT        output directory, seen by the TaskManagers    (/results)
#   DSPARK_PROFILE       model profile                                 (coder)
#   DSPARK_DURATION      seconds to run; empty runs until cancelled    (empty)
#   DSPARK_JOB_ARGS      more job arguments, split at blanks           (empty)
#   DSPARK_PARALLELISM   `flink run -p`; empty keeps the cluster default
#   DSPARK_WAIT_TIMEOUT  seconds to wait for the cluster and endpoint  (1800)
#   DSPARK_BACKEND       the job's --backend; empty: gpu when a TaskManager advertises a GPU (Flink's
#                        external resource `gpu`, the gpu image), else cpu (the parse step then runs
#                        in the TaskManagers' JVM, no Python worker: docs/flink.md)
# Arguments given to this script are passed on to the job, after DSPARK_JOB_ARGS.
set -euo pipefail

jobmanager="${FLINK_JOBMANAGER:-jobmanager:8081}"
endpoint="${DSPARK_ENDPOINT:-http://vllm:8000}"
job="${DSPARK_JOB:-/opt/flink/usrlib/features.py}"
output="${DSPARK_OUTPUT:-/results}"
profile="${DSPARK_PROFILE:-coder}"
duration="${DSPARK_DURATION:-}"
parallelism="${DSPARK_PARALLELISM:-}"
timeout="${DSPARK_WAIT_TIMEOUT:-1800}"
python="${DSPARK_PYTHON:-python}"

"$python" - "$jobmanager" "$endpoint" "$timeout" <<'PY'
import json
import sys
import time
import urllib.request

jobmanager, endpoint, timeout = sys.argv[1], sys.argv[2].rstrip("/"), float(sys.argv[3])
deadline = time.monotonic() + timeout


def wait(what, url, ready):
    last = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if ready(json.load(response)):
                    print(f"submit: {what} ready ({url})", flush=True)
                    return
                last = "not ready yet"
        except Exception as exc:  # connection refused, DNS not yet there, 503 while loading
            last = exc
        time.sleep(2)
    sys.exit(f"submit: gave up after {timeout:.0f} s waiting for {what} at {url}: {last}")


wait("Flink cluster", f"http://{jobmanager}/overview", lambda o: o.get("taskmanagers", 0) > 0)
wait("model endpoint", f"{endpoint}/v1/models", lambda o: bool(o.get("data")))
PY

backend="${DSPARK_BACKEND:-}"
if [ -z "$backend" ]; then
    # The TaskManagers' external resources, from the JobManager: a GPU anywhere makes it a GPU job.
    backend=$("$python" - "$jobmanager" <<'PY'
import json
import sys
import urllib.request

with urllib.request.urlopen(f"http://{sys.argv[1]}/taskmanagers", timeout=10) as response:
    managers = json.load(response).get("taskmanagers", [])
gpus = sum(float(m.get("totalResource", {}).get("extendedResources", {}).get("gpu", 0) or 0) for m in managers)
print("gpu" if gpus > 0 else "cpu")
PY
)
    echo "submit: --backend $backend (TaskManagers with a GPU: $([ "$backend" = gpu ] && echo yes || echo none))"
fi

run_args=(-m "$jobmanager")
if [ -n "$parallelism" ]; then
    run_args+=(-p "$parallelism")
fi
job_args=(--endpoint "$endpoint" --output "$output" --profile "$profile" --backend "$backend")
if [ -n "$duration" ]; then
    job_args+=(--duration "$duration")
fi
read -r -a extra <<<"${DSPARK_JOB_ARGS:-}"
job_args+=("${extra[@]}")

echo "submit: flink run ${run_args[*]} -py $job ${job_args[*]} $*"
exec flink run "${run_args[@]}" -py "$job" "${job_args[@]}" "$@"
