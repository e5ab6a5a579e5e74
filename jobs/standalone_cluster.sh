#!/usr/bin/env bash
# A standalone Flink cluster (one JobManager, one TaskManager) from the PyFlink wheel's own scripts, and the
# feature job submitted to it with `flink run -py`: the same commands a real cluster takes.
#
#   jobs/standalone_cluster.sh run [features.py args...]   start, submit (attached), stop
#   jobs/standalone_cluster.sh start | stop | status
#   jobs/standalone_cluster.sh submit [features.py args...]
#   jobs/standalone_cluster.sh submit-sql FILE.sql          the SQL runner of the connector jar (no Python program)
#   jobs/standalone_cluster.sh sql-client [-f FILE.sql ...]  Flink's SQL Client (the wheel's bin/sql-client.sh) on
#                                                           the cluster, with the connector jar (-j)
#   jobs/standalone_cluster.sh sql-gateway [PORT]           Flink's SQL Gateway on the cluster, in the foreground,
#                                                           its REST endpoint on 127.0.0.1:PORT (default 8083)
#   jobs/standalone_cluster.sh drain JOB_ID                 stop a job with a final savepoint, draining it
#   jobs/standalone_cluster.sh suspend JOB_ID               stop a job with a savepoint, not draining it (its
#                                                           path is printed); DSPARK_FROM_SAVEPOINT=PATH submit
#                                                           resumes it from there
#   jobs/standalone_cluster.sh kill-taskmanager             SIGKILL the TaskManager and its Python workers
#   jobs/standalone_cluster.sh start-taskmanager
#
# Settings (environment):
#   DSPARK_PYTHON        Python with apache-flink and this package       (python3 on PATH)
#   DSPARK_CLUSTER_DIR   conf, logs, pids, checkpoints of the cluster     (/tmp/dspark-cluster-$USER)
#   DSPARK_REST_PORT     the JobManager's REST port                       (a free port, kept in the dir)
#   DSPARK_SLOTS         task slots of the TaskManager                    (2)
#   DSPARK_PROM_PORTS    Prometheus reporter port range                   (9250-9269)
#   DSPARK_JOB           the job script `submit` and `run` send           (jobs/features.py)
#   DSPARK_DETACHED      1: `submit` returns once the job is submitted     (attached)
#   DSPARK_FROM_SAVEPOINT  `submit` restores the job from this savepoint    (none)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
python="${DSPARK_PYTHON:-python3}"
# The cluster's scripts and the planner come from the Python that has apache-flink and dspark-vllm: a shell
# whose venv is not activated finds another python3, which is said in one line.
found="$(command -v "$python" || true)"
if [ -z "$found" ]; then
    echo "cluster: no Python '$python' on the PATH: activate the venv (. .venv/bin/activate) or set DSPARK_PYTHON" >&2
    exit 2
fi
python="$found"
dir="${DSPARK_CLUSTER_DIR:-/tmp/dspark-cluster-${USER:-$(id -un)}}"
if ! flink_home="$("$python" -c 'import os, pyflink; print(os.path.dirname(os.path.abspath(pyflink.__file__)))' \
    2>/dev/null)"; then
    echo "cluster: $python cannot import pyflink: activate the venv that has dspark-vllm (. .venv/bin/activate)" \
        "or set DSPARK_PYTHON to its python" >&2
    exit 2
fi

export FLINK_HOME="$flink_home"
export FLINK_CONF_DIR="$dir/conf"
export FLINK_LOG_DIR="$dir/log"
export FLINK_PID_DIR="$dir/pid"

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_conf() {
    mkdir -p "$FLINK_CONF_DIR" "$FLINK_LOG_DIR" "$FLINK_PID_DIR" "$dir/checkpoints"
    local rest_port="${DSPARK_REST_PORT:-}"
    if [ -z "$rest_port" ]; then
        rest_port="$(cat "$dir/rest.port" 2>/dev/null || free_port)"
    fi
    echo "$rest_port" >"$dir/rest.port"
    local rpc_port
    rpc_port="$(free_port)"
    cp "$flink_home"/conf/log4j*.properties "$FLINK_CONF_DIR/"
    # Flink logs at INFO the whole environment of the Python processes it starts: the client's for `flink run
    # -py` (PythonEnvUtils), a TaskManager's for each Python worker (Beam's DefaultJobBundleFactory). Secrets
    # in those environments (an API key named by 'api-key.env') would land in the logs.
    local file
    for file in log4j-cli.properties log4j.properties log4j-console.properties; do
        cat >>"$FLINK_CONF_DIR/$file" <<'LOG4J'
logger.dsparkpythonenv.name = org.apache.flink.client.python.PythonEnvUtils
logger.dsparkpythonenv.level = WARN
logger.dsparkbeamenv.name = org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory
logger.dsparkbeamenv.level = WARN
LOG4J
    done
    # The JVM options of the wheel's own config (Java 17 needs its --add-opens), then ours.
    local java_opts
    java_opts="$(grep -E '^ +all: --add-' "$flink_home/conf/config.yaml" | sed 's/^ *all: //')"
    cat >"$FLINK_CONF_DIR/config.yaml" <<EOF
env.java.opts.all: $java_opts
jobmanager.rpc.address: localhost
jobmanager.rpc.port: $rpc_port
jobmanager.bind-host: 127.0.0.1
rest.address: localhost
rest.bind-address: 127.0.0.1
rest.port: $rest_port
taskmanager.bind-host: 127.0.0.1
taskmanager.host: localhost
taskmanager.rpc.port: 0
taskmanager.data.port: 0
blob.server.port: 0
jobmanager.memory.process.size: 1024m
taskmanager.memory.process.size: 2048m
taskmanager.memory.managed.fraction: 0.2
taskmanager.numberOfTaskSlots: ${DSPARK_SLOTS:-2}
parallelism.default: 1
env.pid.dir: $FLINK_PID_DIR
env.log.dir: $FLINK_LOG_DIR
heartbeat.interval: 2000
heartbeat.timeout: 10000
restart-strategy.type: fixed-delay
restart-strategy.fixed-delay.attempts: 20
restart-strategy.fixed-delay.delay: 2 s
execution.checkpointing.dir: file://$dir/checkpoints
python.executable: $python
python.client.executable: $python
metrics.reporter.prom.factory.class: org.apache.flink.metrics.prometheus.PrometheusReporterFactory
metrics.reporter.prom.port: ${DSPARK_PROM_PORTS:-9250-9269}
EOF
}

rest_url() { echo "http://127.0.0.1:$(cat "$dir/rest.port")"; }

wait_for_taskmanager() {
    local deadline=$((SECONDS + ${1:-90}))
    while [ $SECONDS -lt $deadline ]; do
        if "$python" - "$(rest_url)" <<'PY' 2>/dev/null; then
import json, sys, urllib.request
overview = json.load(urllib.request.urlopen(sys.argv[1] + "/overview", timeout=3))
sys.exit(0 if overview.get("taskmanagers", 0) > 0 else 1)
PY
            echo "cluster: ready at $(rest_url)"
            return 0
        fi
        sleep 1
    done
    echo "cluster: no TaskManager registered within ${1:-90} s; logs in $FLINK_LOG_DIR" >&2
    return 1
}

start() {
    write_conf
    "$flink_home/bin/jobmanager.sh" start >/dev/null
    "$flink_home/bin/taskmanager.sh" start >/dev/null
    wait_for_taskmanager 120
}

stop() {
    "$flink_home/bin/taskmanager.sh" stop-all >/dev/null 2>&1 || true
    "$flink_home/bin/jobmanager.sh" stop-all >/dev/null 2>&1 || true
    echo "cluster: stopped"
}

submit() {
    # connector.flink.use_connector adds the connector jar and, from a checkout, ships the package itself.
    local detached=() restore=()
    [ "${DSPARK_DETACHED:-0}" = 1 ] && detached=(-d)
    [ -n "${DSPARK_FROM_SAVEPOINT:-}" ] && restore=(-s "$DSPARK_FROM_SAVEPOINT")
    "$flink_home/bin/flink" run -m "localhost:$(cat "$dir/rest.port")" "${detached[@]}" "${restore[@]}" \
        -pyexec "$python" -pyclientexec "$python" -py "${DSPARK_JOB:-$repo/jobs/features.py}" "$@"
}

submit_sql() {
    local detached=() jar
    [ "${DSPARK_DETACHED:-0}" = 1 ] && detached=(-d)
    jar="$("$python" -m connector.cli sql --jar)"
    # Python functions in a Java/SQL job need flink-python (in opt/ of a Flink distribution): on the job's
    # classpath here, or copied into lib/ as Flink's docs say.
    "$flink_home/bin/flink" run -m "localhost:$(cat "$dir/rest.port")" "${detached[@]}" \
        -C "file://$(ls "$flink_home"/opt/flink-python-*.jar)" -c io.dspark.vllm.sql.SqlRunner "$jar" "$@"
}

sql_opt_dir() {
    # The wheel's bin/sql-client.sh and bin/sql-gateway.sh look for flink-sql-gateway in opt/, which the wheel
    # lacks: an opt/ of the cluster's own with the wheel's jars and that one, from Maven Central (the set
    # deploy/maven/flink-sql-gateway.pom.xml, at the wheel's Flink version). The wheel is left as installed.
    local gateway
    gateway="$(bash "$repo/deploy/maven/fetch.sh" flink-sql-gateway)"
    mkdir -p "$dir/opt"
    rm -f "$dir"/opt/*.jar
    ln -s "$flink_home"/opt/*.jar "$gateway"/*.jar "$dir/opt/"
    export FLINK_OPT_DIR="$dir/opt"
}

sql_client() {
    [ -f "$FLINK_CONF_DIR/config.yaml" ] || { echo "cluster: not started (no $FLINK_CONF_DIR)" >&2; exit 1; }
    sql_opt_dir
    local jar
    jar="$("$python" -m connector.cli sql --jar)"
    exec "$flink_home/bin/sql-client.sh" -j "$jar" "$@"
}

sql_gateway() {
    # In the foreground (exec: this process becomes the Gateway's JVM), so that whoever started it stops it by
    # its pid. A session adds the connector jar itself with ADD JAR (the Gateway finds a table's factory in the
    # session's class loader, which 'pipeline.jars' does not extend).
    [ -f "$FLINK_CONF_DIR/config.yaml" ] || { echo "cluster: not started (no $FLINK_CONF_DIR)" >&2; exit 1; }
    sql_opt_dir
    exec "$flink_home/bin/sql-gateway.sh" start-foreground \
        -Dsql-gateway.endpoint.rest.address=127.0.0.1 -Dsql-gateway.endpoint.rest.bind-address=127.0.0.1 \
        -Dsql-gateway.endpoint.rest.port="${1:-8083}"
}

descendants() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do
        echo "$child"
        descendants "$child"
    done
}

kill_taskmanager() {
    # The TaskManager and its Python workers, as when its machine or container dies: workers orphaned by a
    # SIGKILLed TaskManager otherwise live on.
    local pidfile pid
    for pidfile in "$FLINK_PID_DIR"/flink-*-taskexecutor.pid; do
        [ -f "$pidfile" ] || continue
        while read -r pid; do
            [ -n "$pid" ] || continue
            local workers
            workers="$(descendants "$pid")"
            kill -9 "$pid" 2>/dev/null && echo "cluster: killed TaskManager $pid"
            [ -n "$workers" ] && kill -9 $workers 2>/dev/null || true
        done <"$pidfile"
        rm -f "$pidfile"
    done
}

command="${1:-run}"
shift || true
case "$command" in
    start) start ;;
    stop) stop ;;
    status) echo "FLINK_HOME=$flink_home conf=$FLINK_CONF_DIR rest=$(rest_url)" ;;
    submit) submit "$@" ;;
    submit-sql) submit_sql "$@" ;;
    sql-client) sql_client "$@" ;;
    sql-gateway) sql_gateway "$@" ;;
    drain)
        # MAX_WATERMARK first (every window fires), then a savepoint that commits the sinks' files.
        "$flink_home/bin/flink" stop -m "localhost:$(cat "$dir/rest.port")" --drain \
            --savepointPath "file://$dir/savepoints" "$1"
        ;;
    suspend)
        # A savepoint with the job's state as it is (requests in flight included), then the job stops.
        "$flink_home/bin/flink" stop -m "localhost:$(cat "$dir/rest.port")" \
            --savepointPath "file://$dir/savepoints" "$1"
        ;;
    kill-taskmanager) kill_taskmanager ;;
    start-taskmanager) "$flink_home/bin/taskmanager.sh" start >/dev/null && wait_for_taskmanager 120 ;;
    run)
        trap stop EXIT
        start
        submit "$@"
        ;;
    *)
        sed -n '2,28p' "$0" >&2
        exit 2
        ;;
esac
