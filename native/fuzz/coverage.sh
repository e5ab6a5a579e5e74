#!/usr/bin/env bash
# Line coverage of the native core by the fuzz targets' corpora (llvm-cov): both targets built with clang's
# source-based coverage (and the checked build's flags: native/fuzz/run.sh), every input of the committed
# corpora (native/fuzz/corpus, native/fuzz/corpus-plan, the plans) and of what run.sh found (native/fuzz/build/
# corpus-*) run once, the coverage printed per file and held to native/fuzz/coverage-floor.txt: a core file
# below its floor fails (exit 1). The committed corpora alone reach the floors, so the check does not depend on
# what a fuzzing run happened to find. Run run.sh first (it builds the objects this links).
#   bash native/fuzz/coverage.sh          (needs clang++ and llvm-cov / llvm-profdata of the same version)
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-.venv/bin/python}"
cxx=$(command -v clang++ || command -v clang++-14 || true)
version=$("$cxx" --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
cov=$(command -v "llvm-cov-$version" || command -v llvm-cov || true)
profdata=$(command -v "llvm-profdata-$version" || command -v llvm-profdata || true)
if [ -z "$cov" ] || [ -z "$profdata" ]; then
    echo "coverage: no llvm-cov/llvm-profdata for clang $version: apt-get install llvm-$version" >&2
    exit 1
fi
build=native/fuzz/build
objects="$build/checked"
if [ ! -f "$objects/simdjson.o" ] || [ ! -f "$build/plans.h" ]; then
    echo "coverage: run native/fuzz/run.sh first (it builds the objects linked here)" >&2
    exit 1
fi
simdjson=$("$python" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("simdjson").origin).parent)')
re2=$("$python" native/build_native.py --re2-dir)
out="$build/coverage"
mkdir -p "$out"
rm -f "$out"/*.profraw
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined)
pids=()
for target in parse plan; do  # (again only when a source is newer than the binary)
    binary="$out/fuzz_$target"
    if [ -x "$binary" ] && [ -z "$(find native/*.cpp native/*.h native/fuzz/*.cpp native/fuzz/*.h "$build/plans.h" \
        -newer "$binary")" ]; then
        continue
    fi
    "$cxx" "${flags[@]}" -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping -DDSPARK_CHECK_GROUPS \
        -DDSPARK_KEPT_BYTES=16384 -pthread -I native -I native/fuzz -I "$build" -I "$simdjson" -I "$re2" \
        native/fuzz/fuzz_$target.cpp native/dspark_core.cpp native/dspark_exact.cpp native/dspark_json.cpp \
        native/dspark_extract.cpp native/dspark_match.cpp "$objects/simdjson.o" "$build"/re2/*.o \
        -o "$binary" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
"$python" native/fuzz/plans.py --seeds "$build/plans"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
replay() {  # target, corpus folders: every input once (-runs=0 runs the corpus and stops)
    local target=$1
    shift
    local folders=()
    for f in "$@"; do [ -d "$f" ] && folders+=("$f"); done
    LLVM_PROFILE_FILE="$out/$target-%p.profraw" "$out/fuzz_$target" -runs=0 -max_len=131072 -rss_limit_mb=2048 \
        -timeout=30 "${folders[@]}" 2>"$out/$target.log" || { tail -20 "$out/$target.log"; exit 1; }
    grep -E '^Done [0-9]+ runs' "$out/$target.log" | sed "s/^/coverage: $target: /" || true
}
replay parse native/fuzz/corpus "$build/corpus-parse"
replay plan native/fuzz/corpus-plan "$build/plans" "$build/corpus-plan"
"$profdata" merge -sparse "$out"/*.profraw -o "$out/all.profdata"
sources=(native/dspark_core.cpp native/dspark_exact.cpp native/dspark_json.cpp native/dspark_extract.cpp native/dspark_match.cpp)
"$cov" export -summary-only -instr-profile="$out/all.profdata" "$out/fuzz_parse" -object "$out/fuzz_plan" \
    "${sources[@]}" >"$out/summary.json"
"$python" - "$out/summary.json" native/fuzz/coverage-floor.txt <<'PY'
import json
import sys
from pathlib import Path

files = {Path(f["filename"]).name: f["summary"] for f in json.load(open(sys.argv[1]))["data"][0]["files"]}
floors = {}
for line in Path(sys.argv[2]).read_text().splitlines():
    if line.strip() and not line.startswith("#"):
        name, floor = line.split()
        floors[name] = float(floor)
print(f"coverage: {'file':<20} {'lines':>16} {'line %':>7} {'floor':>6} {'branch %':>9} {'functions %':>12}")
low = []
for name, s in sorted(files.items()):
    lines, branches, functions = s["lines"], s["branches"], s["functions"]
    floor = floors.get(name)
    print(f"coverage: {name:<20} {lines['covered']:>7}/{lines['count']:<8} {lines['percent']:>7.1f} "
          f"{'-' if floor is None else f'{floor:.1f}':>6} {branches['percent']:>9.1f} {functions['percent']:>12.1f}")
    if floor is not None and lines["percent"] < floor:
        low.append(f"{name} {lines['percent']:.1f}% < {floor:.1f}%")
missing = sorted(set(floors) - set(files))
if missing or low:
    print("coverage: below the floor (native/fuzz/coverage-floor.txt): " + "; ".join(low + [f"{m}: not measured" for m in missing]))
    sys.exit(1)
print("coverage: every core file at or above its floor")
PY
