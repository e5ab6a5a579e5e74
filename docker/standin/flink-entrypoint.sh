#!/usr/bin/env bash
# Entrypoint of the stand-in Flink image (docker/standin/Dockerfile): the official image's contract.
#
#   jobmanager [ARGS]    the JobManager, in the foreground
#   taskmanager [ARGS]   a TaskManager, in the foreground
#   help                 this text
#   anything else        run as a command (`flink run ...`, `bash`)
#
# First, as the official entrypoint does, options are merged into conf/config.yaml with Flink's own
# config-parser-utils.sh: jobmanager.rpc.address from JOB_MANAGER_RPC_ADDRESS (default: this host's
# name), blob.server.port 6124, taskmanager.numberOfTaskSlots from TASK_MANAGER_NUMBER_OF_TASK_SLOTS,
# and FLINK_PROPERTIES, one `key: value` per line with every blank removed and the key ending at the
# first ':'.
set -euo pipefail

if [ "${1:-help}" = help ]; then
    sed -n '2,7p' "$0"
    exit 0
fi

options=(
    "-Djobmanager.rpc.address=${JOB_MANAGER_RPC_ADDRESS:-$(hostname -f)}"
    "-Dblob.server.port=6124"
)
if [ -n "${TASK_MANAGER_NUMBER_OF_TASK_SLOTS:-}" ]; then
    options+=("-Dtaskmanager.numberOfTaskSlots=${TASK_MANAGER_NUMBER_OF_TASK_SLOTS}")
fi
while IFS= read -r line; do
    line="${line//[[:space:]]/}"
    if [ -n "$line" ]; then
        options+=("-D${line%%:*}=${line#*:}")
    fi
done <<<"${FLINK_PROPERTIES:-}"
"$FLINK_HOME/bin/config-parser-utils.sh" "$FLINK_HOME/conf" "$FLINK_HOME/bin" "$FLINK_HOME/lib" "${options[@]}"

case "$1" in
    jobmanager | taskmanager)
        process="$1"
        shift
        exec "$FLINK_HOME/bin/$process.sh" start-foreground "$@"
        ;;
esac
exec "$@"
