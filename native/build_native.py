"""Compiles the native parser core (native/dspark_core.cpp + simdjson) into connector/_native/.

Called by the build backend (java/backend.py) before setuptools, so `pip install -e .` and `pip install .`
build it; `python native/build_native.py` rebuilds it in a checkout. simdjson comes from the pysimdjson
wheel (a build requirement: its package ships simdjson's amalgamation), so nothing beyond a C++17 compiler
is needed. simdjson's On-Demand API picks its kernel when it is compiled, so on x86-64 the library is built
twice, for Haswell-class CPUs (AVX2) and for any x86-64; connector/decode/native.py loads the one the CPU
runs. libstdc++ is linked statically: the library needs only the C library, in any wheel and image.
"""

from __future__ import annotations

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
SOURCES = [ROOT / "native" / name for name in ("dspark_core.cpp", "dspark_exact.cpp")]
HEADERS = sorted((ROOT / "native").glob("*.h"))
OUT = ROOT / "connector" / "_native"


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


def build(force: bool = False) -> list[Path]:
    simdjson = simdjson_dir()
    inputs = [*SOURCES, *HEADERS, simdjson / "simdjson.cpp", simdjson / "simdjson.h", Path(__file__)]
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

        def one(item: tuple[str, list[str]]) -> None:
            name, flags = item
            target = OUT / name
            command = [
                cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-DNDEBUG", *flags, *extra,
                f"-I{simdjson}", *map(str, SOURCES), str(simdjson / "simdjson.cpp"),
                "-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL", "-o", f"{target}.tmp",
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
