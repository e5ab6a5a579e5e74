#!/usr/bin/env bash
# The GPU check: the cuDF (pylibcudf) backend against the CPU backend on the same inputs, and both timed.
# For a machine with an NVIDIA GPU where `import pylibcudf, rmm` works: pip-installed, or carried to the device
# tool's machine with benchmarks/gpu_wheels.sh (installed under /tmp/site). Writes its logs under $OUT (or
# ./gpu-check): env.txt, probe.txt (what libcudf does with the inputs the design depends on), pytest.txt,
# bench.txt and bench.json.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONPATH=.:/tmp/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
# libcudf 26.10 needs nvJitLink >= 13.3; a carried one is loaded ahead of the machine's.
jit=$(find /tmp/site/nvidia/cu13/lib -name "libnvJitLink.so.*" 2>/dev/null | head -1)
if [ -n "$jit" ]; then export LD_PRELOAD=$jit; fi
# The cpu backend's native core (one build serves every Python): carried built, else built here (g++ and
# pysimdjson's sources, as `pip install -e .` does).
if ! ls connector/_native/libdspark*.so >/dev/null 2>&1; then python3 native/build_native.py; fi
python3 - <<'PY' 2>&1 | tee "$out/env.txt"
import pyarrow, pylibcudf, rmm
print("pyarrow", pyarrow.__version__, "pylibcudf", getattr(pylibcudf, "__version__", "?"), "rmm", rmm.__version__)
from connector.parse.backends import select_backend
print("gpu reader:", select_backend("gpu")[0].name)
PY
timeout 60 python3 benchmarks/libcudf_probe.py 2>&1 | tee "$out/probe.txt"
# Equality: the host-side checks, then every deserializer test on the gpu backend (golden, malformed, content,
# the property test) and the cross-backend table comparison.
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_reader.py 2>&1 | tee "$out/pytest.txt"
timeout 180 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py tests/test_properties.py tests/test_hostile.py 2>&1 \
  | tee -a "$out/pytest.txt"
# Timings: both backends, 10k-body batches and one >= 64 MB batch.
timeout 240 python3 -m connector.cli bench parse --no-flink --bodies 100000 --repeat 3 \
  --output-json "$out/bench.json" 2>&1 | tee "$out/bench.txt"
