#!/usr/bin/env bash
# The GPU check: the cuDF (pylibcudf) backend against the CPU backend on the same inputs, and both timed.
# For a machine with an NVIDIA GPU where `import pylibcudf, rmm` works (see docs/benchmarks.md for carrying
# the wheels to the device tool's machine). Writes its logs under $OUT (or ./gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONPATH=.:${PYTHONPATH:-}
python3 - <<'PY' 2>&1 | tee "$out/env.txt"
import pyarrow, pylibcudf, rmm
print("pyarrow", pyarrow.__version__, "pylibcudf", pylibcudf.__version__, "rmm", rmm.__version__)
from connector.decode.readers import select_reader
print("gpu reader:", select_reader("gpu")[0].name)
PY
# Equality: every deserializer test on the gpu backend, and the cross-backend table comparison.
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py 2>&1 | tee "$out/pytest.txt"
# Timings: both backends, 10k-body batches and one >= 64 MB batch.
python3 -m connector.cli bench parse --no-flink --bodies 100000 --repeat 3 --output-json "$out/bench.json" 2>&1 \
  | tee "$out/bench.txt"
