#!/usr/bin/env bash
# Builds one of the core's libFuzzer targets with ASan + UBSan (clang) and runs it for a bounded time over its
# committed corpus (what it finds new goes to native/fuzz/build/corpus-TARGET, not into the repo).
#   bash native/fuzz/run.sh [SECONDS] [TARGET] [BUILD]
#     SECONDS  how long (default 60)
#     TARGET   parse: bodies under every plan of native/fuzz/plans.py (default), corpus native/fuzz/corpus;
#              plan:  the plan reader (hostile plans, with bodies), corpus native/fuzz/corpus-plan + the plans
#     BUILD    checked: -O1 with DSPARK_CHECK_GROUPS, every shortcut of dspark_match.h held to RE2 (default);
#              shipped: the library's own flags (-O2 -DNDEBUG, native/build_native.py), sanitized the same way
# Bodies up to 128 KiB (-len_control=0: libFuzzer's length control otherwise keeps them near 4 KiB), and the
# core built with DSPARK_KEPT_BYTES=16 KiB, so that a body over it releases the parsers' buffers as one over
# 16 MiB does in the library. Needs clang with libFuzzer and a Python with the project (PYTHON, .venv). More
# libFuzzer flags: FUZZ_ARGS (e.g. "-jobs=2"); another corpus folder for what is found: FUZZ_CORPUS.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
target="${2:-parse}"
variant="${3:-checked}"
python="${PYTHON:-.venv/bin/python}"
case "$target" in parse | plan) ;; *) echo "fuzz: unknown target '$target' (parse, plan)" >&2; exit 2 ;; esac
cxx=$(command -v clang++ || command -v clang++-14 || command -v clang++-15 || command -v clang++-16 || true)
if [ -z "$cxx" ]; then
    echo "fuzz: no clang++ (libFuzzer needs clang): apt-get install clang" >&2
    exit 1
fi
simdjson=$("$python" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("simdjson").origin).parent)')
re2=$("$python" native/build_native.py --re2-dir)  # the pinned RE2 release, fetched into the cache once
build=native/fuzz/build
mkdir -p "$build"
"$python" native/fuzz/plans.py >"$build/plans.h.new"
cmp -s "$build/plans.h.new" "$build/plans.h" 2>/dev/null || mv "$build/plans.h.new" "$build/plans.h"
rm -f "$build/plans.h.new"
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
case "$variant" in
    checked) flags=(-std=c++17 -O1 "${sanitize[@]}") core=(-DDSPARK_CHECK_GROUPS) ;;
    shipped) flags=(-std=c++17 -O2 -DNDEBUG "${sanitize[@]}") core=() ;;
    *) echo "fuzz: unknown build '$variant' (checked, shipped)" >&2; exit 2 ;;
esac
objects="$build/$variant"
mkdir -p "$objects" "$build/re2"
if [ ! -f "$objects/simdjson.o" ] || [ "$simdjson/simdjson.cpp" -nt "$objects/simdjson.o" ]; then
    "$cxx" "${flags[@]}" -c "$simdjson/simdjson.cpp" -o "$objects/simdjson.o"
fi
# RE2, sanitized too, the same objects for both builds (-O1: RE2's code, not the core's; compiling it twice
# would double the step): an object per source, compiled again when the source is newer, two at once.
re2_flags=(-std=c++17 -O1 "${sanitize[@]}")
re2_objects=() pids=()
for source in $("$python" -c 'import sys; sys.path.insert(0, "native"); import build_native; print(*build_native.RE2_FILES)'); do
    object="$build/re2/${source//\//-}.o"
    re2_objects+=("$object")
    if [ ! -f "$object" ] || [ "$re2/$source" -nt "$object" ]; then
        "$cxx" "${re2_flags[@]}" -pthread -I "$re2" -c "$re2/$source" -o "$object" &
        pids+=($!)
        if [ "${#pids[@]}" -ge 2 ]; then
            wait "${pids[0]}"
            pids=("${pids[@]:1}")
        fi
    fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
binary="$build/fuzz_${target}-$variant"
# -fsanitize=fuzzer (its coverage) on the core and the target only: simdjson and RE2 are linked as they are.
"$cxx" "${flags[@]}" "${core[@]}" -fsanitize=fuzzer -DDSPARK_KEPT_BYTES=16384 -pthread -I native -I native/fuzz \
    -I "$build" -I "$simdjson" -I "$re2" native/fuzz/fuzz_$target.cpp native/dspark_core.cpp native/dspark_exact.cpp \
    native/dspark_json.cpp native/dspark_extract.cpp native/dspark_match.cpp "$objects/simdjson.o" "${re2_objects[@]}" \
    -o "$binary"
corpora=(native/fuzz/corpus)
extra=()
if [ "$target" = plan ]; then
    "$python" native/fuzz/plans.py --seeds "$build/plans"
    corpora=(native/fuzz/corpus-plan "$build/plans")
    extra=(-dict=native/fuzz/plan.dict)
fi
found="${FUZZ_CORPUS:-$build/corpus-$target}"
mkdir -p "$found"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# shellcheck disable=SC2086  # FUZZ_ARGS: flags, split
"$binary" -max_total_time="$seconds" -max_len=131072 -len_control=0 -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$build/$target-" "${extra[@]}" ${FUZZ_ARGS:-} "$found" "${corpora[@]}"
