#!/usr/bin/env bash
# Stops the broker deploy/kafka/start.sh started from DIR, by the pid in DIR/kafka.pid: SIGTERM (a clean
# shutdown), then SIGKILL after KAFKA_STOP_TIMEOUT seconds (default 30). Nothing to stop is not an error.
set -euo pipefail
dir="${1:?usage: stop.sh DIR}"
pidfile="$dir/kafka.pid"
[ -s "$pidfile" ] || exit 0
pid="$(cat "$pidfile")"
if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 "${KAFKA_STOP_TIMEOUT:-30}"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    kill -KILL "$pid" 2>/dev/null || true
fi
rm -f "$pidfile"
