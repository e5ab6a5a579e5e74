#!/usr/bin/env bash
# Builds the core's libFuzzer target with ASan + UBSan (clang) and runs it for a bounded time over the
# committed corpus (native/fuzz/corpus; what it finds new goes to native/fuzz/build/corpus, not into the repo).
#   bash native/fuzz/run.sh [SECONDS]     (default 60; needs clang with libFuzzer, a Python with the project)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
python="${PYTHON:-.venv/bin/python}"
cxx=$(command -v clang++ || command -v clang++-14 || command -v clang++-15 || command -v clang++-16 || true)
if [ -z "$cxx" ]; then
    echo "fuzz: no clang++ (libFuzzer needs clang): apt-get install clang" >&2
    exit 1
fi
simdjson=$("$python" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("simdjson").origin).parent)')
build=native/fuzz/build
mkdir -p "$build/corpus"
"$python" native/fuzz/plans.py >"$build/plans.h"
sanitizers="-fsanitize=address,undefined"
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer "$sanitizers" -fno-sanitize-recover=undefined)
if [ ! -f "$build/simdjson.o" ] || [ "$simdjson/simdjson.cpp" -nt "$build/simdjson.o" ]; then
    "$cxx" "${flags[@]}" -c "$simdjson/simdjson.cpp" -o "$build/simdjson.o"
fi
# RE2 (the pinned release, fetched into the cache once by native/build_native.py), sanitized too: an object
# per source, compiled again when it is newer, two at once.
re2=$("$python" native/build_native.py --re2-dir)
mkdir -p "$build/re2"
re2_objects=() pids=()
for source in $("$python" -c 'import sys; sys.path.insert(0, "native"); import build_native; print(*build_native.RE2_FILES)'); do
    object="$build/re2/${source//\//-}.o"
    re2_objects+=("$object")
    if [ ! -f "$object" ] || [ "$re2/$source" -nt "$object" ]; then
        "$cxx" "${flags[@]}" -pthread -I "$re2" -c "$re2/$source" -o "$object" &
        pids+=($!)
        if [ "${#pids[@]}" -ge 2 ]; then
            wait "${pids[0]}"
            pids=("${pids[@]:1}")
        fi
    fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
# DSPARK_CHECK_GROUPS: every match, group and count of dspark_match.h's shortcuts is held against RE2's own.
"$cxx" "${flags[@]}" -fsanitize=fuzzer -DDSPARK_CHECK_GROUPS -pthread -I native -I "$build" -I "$simdjson" -I "$re2" \
    native/fuzz/fuzz_parse.cpp native/dspark_core.cpp native/dspark_exact.cpp native/dspark_json.cpp native/dspark_extract.cpp native/dspark_match.cpp \
    "$build/simdjson.o" "${re2_objects[@]}" -o "$build/fuzz_parse"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/fuzz_parse" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$build/" "$build/corpus" native/fuzz/corpus
