#!/usr/bin/env bash
# Carrying cuDF to the device tool's GPU machine (H200, Python 3.12, CUDA 13; it reaches no registry and each
# call carries at most 64 MiB). The wheels are ~335 MB, so they travel as parts, one per call, to the same
# warm machine (it goes back after 30 s idle: make the calls back to back).
#
#   here:    bash benchmarks/gpu_wheels.sh pack           # downloads, packs, splits into .gpu-wheels/part-*
#   device:  bash benchmarks/gpu_wheels.sh receive        # one call per part (see below for what to carry)
#   device:  bash benchmarks/gpu_wheels.sh install        # in the last call: checks, unpacks, pip --target
#            then PYTHONPATH=/tmp/site:. bash benchmarks/gpu_check.sh
#
# docs/benchmarks.md has the calls written out.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpu-wheels
parts=/tmp/gpu-parts
# Versions the GPU reader was written against; the machine's own packages (cuda-bindings, cuda-toolkit,
# numpy, pyarrow, pytest, hypothesis, httpx, PyYAML) are used as they are there. libcudf needs nvJitLink
# >= 13.3, newer than the machine's may be: gpu_check.sh preloads the carried one.
wheels=(
    "pylibcudf-cu13==26.10.2" "libcudf-cu13==26.10.2" "rmm-cu13==26.10.0" "librmm-cu13==26.10.0"
    "libkvikio-cu13==26.10.0" "nvidia-libnvcomp-cu13==5.3.0.16" "rapids-logger==0.3.0" "nvtx==0.2.17"
    "nvidia-nvjitlink==13.5.37"
    "jsonschema==4.26.0" "jsonschema-specifications==2025.9.1" "referencing==0.37.0" "rpds-py==2026.9.1"
    "google-re2==1.1.20251105" "msgspec==0.23.0" "pysimdjson==7.0.2"
)

case "${1:-}" in
pack)
    rm -rf "$dir" && mkdir -p "$dir/wheels"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir/wheels" "${wheels[@]}"
    tar -C "$dir/wheels" -cf "$dir/wheels.tar" .
    rm -rf "$dir/wheels"
    (cd "$dir" && sha256sum wheels.tar >wheels.tar.sha256 && split -b 64000000 -d wheels.tar part- && rm wheels.tar)
    ls -l "$dir"
    ;;
receive)
    # Each call carries one part and the (tiny) checksum: carry=[".gpu-wheels/part-NN", ".gpu-wheels/wheels.tar.sha256"]
    mkdir -p "$parts"
    cp "$dir"/part-* "$dir"/wheels.tar.sha256 "$parts"/
    ls -l "$parts"
    ;;
install)
    cat "$parts"/part-?? >/tmp/wheels.tar
    (cd /tmp && sha256sum -c "$parts/wheels.tar.sha256")
    rm -rf /tmp/wheels && mkdir -p /tmp/wheels && tar -C /tmp/wheels -xf /tmp/wheels.tar
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/wheels/*.whl
    PYTHONPATH=/tmp/site python3 -c "import pylibcudf, rmm; print('pylibcudf and rmm import')"
    ;;
*)
    echo "usage: $0 pack|receive|install" >&2
    exit 2
    ;;
esac
