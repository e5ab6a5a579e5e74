"""Compiles the native parser core (native/dspark_core.cpp + simdjson) into connector/_native/.

Called by the build backend (java/backend.py) before setuptools, so `pip install -e .` and `pip install .`
build it; `python native/build_native.py` rebuilds it in a checkout. simdjson comes from the pysimdjson
wheel (a build requirement: its package ships simdjson's amalgamation), so nothing beyond a C++17 compiler
is needed. simdjson's On-Demand API picks its kernel when it is compiled, so on x86-64 the library is built
twice, for Haswell-class CPUs (AVX2) and for any x86-64; connector/decode/native.py loads the one the CPU
runs. libstdc++ is linked statically: the library needs only the C library, in any wheel and image.
RE2 (content patterns, native/dspark_extract.cpp) is vendored in native/third_party/re2 and compiled once for
both variants, into object files cached under native/build/ (compiled again only when its sources change).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [
    ROOT / "native" / name
    for name in ("dspark_core.cpp", "dspark_exact.cpp", "dspark_json.cpp", "dspark_extract.cpp", "dspark_match.cpp")
]
HEADERS = sorted((ROOT / "native").glob("*.h"))
OUT = ROOT / "connector" / "_native"
RE2_DIR = ROOT / "native" / "third_party" / "re2"
RE2_SOURCES = sorted([*(RE2_DIR / "re2").glob("*.cc"), *(RE2_DIR / "util").glob("*.cc")])
RE2_HEADERS = sorted([*(RE2_DIR / "re2").glob("*.h"), *(RE2_DIR / "util").glob("*.h")])
BUILD = ROOT / "native" / "build"
# What the libraries export: the C ABI (dspark_core.h), nothing of RE2, simdjson or the C++ library.
EXPORTS = "{ global: dspark_*; local: *; };\n"


def variants() -> dict[str, list[str]]:
    """Library name -> the compiler's target flags."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return {"libdspark-haswell.so": ["-march=haswell"], "libdspark-x86-64.so": []}
    return {"libdspark.so": []}


def simdjson_dir() -> Path:
    spec = importlib.util.find_spec("simdjson")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        if (Path(location) / "simdjson.cpp").is_file():
            return Path(location)
    raise SystemExit(
        "dspark-vllm: simdjson's sources were not found in the pysimdjson package; install pysimdjson>=7.0.2,<8 "
        "(a build requirement) and build again"
    )


def compiler() -> str:
    wanted = os.environ.get("CXX", "")
    found = shutil.which(wanted) if wanted else shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not found:
        raise SystemExit(
            "dspark-vllm: no C++ compiler found to build the native parser core; install one "
            "(e.g. apt-get install g++) or set CXX"
        )
    return found


def re2_objects(cxx: str, extra: list[str]) -> list[Path]:
    """RE2's object files, compiled (two at a time) where missing or older than their sources.

    They are the same for every variant (RE2 is not where a parse spends its time), so they are built without
    target flags, with symbols hidden like the core's: the libraries export only the C ABI. A folder per
    compiler and flags keeps objects of other flags (DSPARK_CXXFLAGS) from being mixed in.
    """
    command = [cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-pthread", "-DNDEBUG", *extra]
    command.append(f"-I{RE2_DIR}")
    real = Path(cxx).resolve()
    key = hashlib.sha256("\0".join([*command, str(real), str(real.stat().st_mtime_ns)]).encode()).hexdigest()
    folder = BUILD / f"re2-{key[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    headers = max(p.stat().st_mtime for p in RE2_HEADERS)
    objects = {source: folder / f"{source.parent.name}-{source.stem}.o" for source in RE2_SOURCES}
    todo = [
        (source, target)
        for source, target in objects.items()
        if not target.is_file() or target.stat().st_mtime < max(headers, source.stat().st_mtime)
    ]

    def one(item: tuple[Path, Path]) -> None:
        source, target = item
        partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        done = subprocess.run([*command, "-c", str(source), "-o", str(partial)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"dspark-vllm: compiling RE2 ({source.name}) failed:\n{done.stdout}{done.stderr}")
        os.replace(partial, target)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(one, todo))
    return list(objects.values())


def build(force: bool = False) -> list[Path]:
    simdjson = simdjson_dir()
    inputs = [*SOURCES, *HEADERS, simdjson / "simdjson.cpp", simdjson / "simdjson.h", Path(__file__)]
    inputs += [*RE2_SOURCES, *RE2_HEADERS]
    newest = max(p.stat().st_mtime for p in inputs)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "__init__.py").touch()
    wanted = variants()
    todo = {
        name: flags
        for name, flags in wanted.items()
        if force or not (OUT / name).is_file() or (OUT / name).stat().st_mtime < newest
    }
    if todo:
        cxx = compiler()
        extra = shlex.split(os.environ.get("DSPARK_CXXFLAGS", ""))
        re2 = re2_objects(cxx, extra)
        exports = BUILD / "exports.map"
        if not exports.is_file() or exports.read_text() != EXPORTS:
            partial = exports.with_name(f"{exports.name}.{os.getpid()}.tmp")
            partial.write_text(EXPORTS)
            os.replace(partial, exports)

        def one(item: tuple[str, list[str]]) -> None:
            name, flags = item
            target = OUT / name
            command = [
                cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread", "-DNDEBUG", *flags,
                *extra, f"-I{simdjson}", f"-I{RE2_DIR}", *map(str, SOURCES), str(simdjson / "simdjson.cpp"),
                *map(str, re2), "-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL",
                f"-Wl,--version-script={exports}", "-o", f"{target}.tmp",
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"dspark-vllm: compiling the native parser core failed:\n{done.stdout}{done.stderr}")
            os.replace(f"{target}.tmp", target)

        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(one, todo.items()))
    return [OUT / name for name in wanted]


if __name__ == "__main__":
    for path in build(force="--force" in sys.argv):
        print(path, file=sys.stderr)
