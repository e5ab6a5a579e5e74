"""Compiles the native parser core (native/dspark_core.cpp + simdjson) into connector/_native/.

Called by the build backend (java/backend.py) before setuptools, so `pip install -e .` and `pip install .`
build it; `python native/build_native.py` rebuilds it in a checkout. simdjson comes from the pysimdjson
wheel (a build requirement: its package ships simdjson's amalgamation), so nothing beyond a C++17 compiler
is needed. simdjson's On-Demand API picks its kernel when it is compiled, so on x86-64 a wheel carries the
library twice, for Haswell-class CPUs (AVX2) and for any x86-64, and connector/parse/native.py loads the one
the CPU runs; an editable install (and `--only-this-cpu`) builds only that one. Each source is compiled on its
own, two at a time, then linked. libstdc++ is linked statically: the library needs only the C library, in any
wheel and image.
RE2 (content patterns, native/dspark_extract.cpp) comes from a package registry when the core is built: the
npm package `re2` 1.19.0 carries RE2's release 2023-03-01 (the last without abseil) under `vendor/`; its
tarball, pinned by sha256, is fetched once into the cache (DSPARK_VLLM_CACHE, else ~/.cache/dspark-vllm),
unpacked there, and compiled once for both variants into object files under native/build/.
`python native/build_native.py --re2-dir` prints the folder of RE2's sources (fetching them if needed);
`--re2-archive DIR` puts the pinned tarball into DIR (the image build's context: docker/standin/build.sh).
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
import tarfile
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [
    ROOT / "native" / name
    for name in ("dspark_core.cpp", "dspark_exact.cpp", "dspark_json.cpp", "dspark_extract.cpp", "dspark_match.cpp")
]
HEADERS = sorted((ROOT / "native").glob("*.h"))
OUT = ROOT / "connector" / "_native"
# RE2 2023-03-01 as the npm package `re2` 1.19.0 (node-re2) ships it under vendor/: every file the library
# needs is byte for byte the tag 2023-03-01 of github.com/google/re2. BSD-3-Clause (vendor/LICENSE).
RE2_RELEASE = "2023-03-01"
RE2_PATH = "re2/-/re2-1.19.0.tgz"  # under the npm registry: DSPARK_VLLM_NPM_REGISTRY (a mirror), else npm's own
RE2_SHA256 = "0c808d5787308d423ab28eb197c62a0d4b26e4315cd2f9bb4a56d3bf533a8113"
# What the library is made of (RE2's Makefile, OFILES): not its tests, fuzzers, benchmarks or PCRE shim.
RE2_FILES = [
    *(f"re2/{name}.cc" for name in [
        "bitmap256", "bitstate", "compile", "dfa", "filtered_re2", "mimics_pcre", "nfa", "onepass", "parse",
        "perl_groups", "prefilter", "prefilter_tree", "prog", "re2", "regexp", "set", "simplify", "stringpiece",
        "tostring", "unicode_casefold", "unicode_groups",
    ]),
    "util/rune.cc",
    "util/strutil.cc",
]  # fmt: skip
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


def cache_dir() -> Path:
    """Where downloads are kept between builds: DSPARK_VLLM_CACHE, else $XDG_CACHE_HOME or ~/.cache, /dspark-vllm."""
    if os.environ.get("DSPARK_VLLM_CACHE"):
        return Path(os.environ["DSPARK_VLLM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dspark-vllm"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_pinned(url: str, sha256: str, what: str) -> Path:
    """The file of `url` in the cache (its last path part), fetched if it is not there (or not it), checked against
    its pinned `sha256`; where it cannot be fetched, one line naming the file to put there (`what` names it)."""
    cache = cache_dir()
    target = cache / url.rsplit("/", 1)[1]
    if target.is_file() and _sha256(target) == sha256:
        return target
    partial = None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=cache, prefix=f"{target.name}.")
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            shutil.copyfileobj(response, out)
        got = _sha256(Path(partial))
        if got != sha256:
            raise OSError(f"its sha256 is {got}, not the pinned {sha256}")
        os.chmod(partial, 0o644)  # (mkstemp's 0600: an image build's context copies it as it is)
        os.replace(partial, target)
        partial = None
    except OSError as exc:
        reason = str(getattr(exc, "reason", None) or exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SystemExit(
            f"dspark-vllm: {what} could not be fetched from {url} ({reason}); put that file "
            f"(sha256 {sha256}) into {cache} or set DSPARK_VLLM_CACHE to a folder that has it"
        ) from None
    finally:
        if partial is not None and os.path.exists(partial):
            os.unlink(partial)
    return target


def re2_archive() -> Path:
    """The pinned RE2 tarball in the cache, fetched from the npm registry if it is not there (or not it)."""
    registry = os.environ.get("DSPARK_VLLM_NPM_REGISTRY") or "https://registry.npmjs.org"
    return fetch_pinned(f"{registry.rstrip('/')}/{RE2_PATH}", RE2_SHA256, f"RE2 {RE2_RELEASE}")


def re2_dir() -> Path:
    """RE2's sources, unpacked from the pinned tarball into the cache once (a folder named by its hash)."""
    folder = cache_dir() / f"re2-{RE2_RELEASE}-{RE2_SHA256[:12]}"
    if (folder / "LICENSE").is_file():
        return folder
    archive = re2_archive()
    wanted = ("package/vendor/re2/", "package/vendor/util/")
    unpacking = tempfile.TemporaryDirectory(dir=archive.parent, ignore_cleanup_errors=True)
    with tarfile.open(archive) as tar, unpacking as partial:
        for member in tar.getmembers():
            name = member.name
            relative = name.removeprefix("package/vendor/")
            flat = name.startswith(wanted) and "/" not in relative.split("/", 1)[1]
            if member.isfile() and (relative == "LICENSE" or relative in RE2_FILES or (flat and name.endswith(".h"))):
                out = Path(partial) / relative
                out.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                out.write_bytes(source.read())
        missing = [f for f in RE2_FILES if not (Path(partial) / f).is_file()]
        if missing:
            raise SystemExit(f"dspark-vllm: {archive} does not hold RE2's {', '.join(missing)}")
        try:
            os.replace(partial, folder)
        except OSError:  # another build unpacked it first
            if not (folder / "LICENSE").is_file():
                raise
    return folder


def re2_objects(cxx: str, extra: list[str]) -> list[Path]:
    """RE2's object files, compiled (two at a time) where missing or older than their sources.

    They are the same for every variant (RE2 is not where a parse spends its time), so they are built without
    target flags, with symbols hidden like the core's: the libraries export only the C ABI. A folder per
    compiler and flags keeps objects of other flags (DSPARK_CXXFLAGS) from being mixed in.
    """
    command = [cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-pthread", "-DNDEBUG", *extra]
    re2 = re2_dir()
    command.append(f"-I{re2}")
    real = Path(cxx).resolve()
    key = hashlib.sha256("\0".join([*command, str(real), str(real.stat().st_mtime_ns)]).encode()).hexdigest()
    folder = BUILD / f"re2-{key[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    # The sources are the pinned release's (the folder is named by its hash): an object once made stays.
    objects = {re2 / f: folder / f"{Path(f).parent.name}-{Path(f).stem}.o" for f in RE2_FILES}
    todo = [(source, target) for source, target in objects.items() if not target.is_file()]

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


def require_current_contract() -> None:
    """The files generated from native/contract.py (the core's codes, versions and kinds for C, Python and Java)
    must match it: a build from a stale one stops with one line saying how to regenerate them."""
    spec = importlib.util.spec_from_file_location("dspark_native_contract", ROOT / "native" / "contract.py")
    contract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(contract)
    contract.require_current()


def this_cpus_variant() -> str:
    """The variant this machine's CPU loads (connector/parse/native.py's choice, read from its source so that the
    build needs nothing of the package)."""
    names = list(variants())
    if len(names) == 1:
        return names[0]
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    haswell = {"avx2", "bmi1", "bmi2", "pclmulqdq"} <= flags and bool({"lzcnt", "abm"} & flags)
    return "libdspark-haswell.so" if haswell else "libdspark-x86-64.so"


def build(force: bool = False, only_this_cpu: bool = False) -> list[Path]:
    """The core's libraries, built where missing or older than their sources: every variant (a wheel, which runs
    on any CPU), or with `only_this_cpu` the one this machine loads (an editable install, which runs here: half
    the compiling)."""
    require_current_contract()
    simdjson = simdjson_dir()
    inputs = [*SOURCES, *HEADERS, simdjson / "simdjson.cpp", simdjson / "simdjson.h", Path(__file__)]
    newest = max(p.stat().st_mtime for p in inputs)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "__init__.py").touch()
    wanted = variants()
    if only_this_cpu:
        for name in wanted:  # another variant older than the sources would go into the jar as it is: stale
            if name != this_cpus_variant() and (OUT / name).is_file() and (OUT / name).stat().st_mtime < newest:
                (OUT / name).unlink()
        wanted = {this_cpus_variant(): wanted[this_cpus_variant()]}
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

        # Each source is compiled on its own (two at a time: simdjson's is the longest), then each variant linked.
        units = [*SOURCES, simdjson / "simdjson.cpp"]
        objects = {name: BUILD / f"{name.removesuffix('.so')}-objects" for name in todo}

        def compile_one(item: tuple[str, Path]) -> None:
            name, source = item
            objects[name].mkdir(parents=True, exist_ok=True)
            target = objects[name] / f"{source.stem}.o"
            command = [
                cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-pthread", "-DNDEBUG", *todo[name],
                *extra, f"-I{simdjson}", f"-I{re2_dir()}", "-c", str(source), "-o", f"{target}.tmp",
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"dspark-vllm: compiling the native parser core failed:\n{done.stdout}{done.stderr}")
            os.replace(f"{target}.tmp", target)

        def link(name: str) -> None:
            target = OUT / name
            command = [
                cxx, "-shared", "-pthread", *(str(objects[name] / f"{u.stem}.o") for u in units), *map(str, re2),
                "-static-libstdc++", "-static-libgcc", "-Wl,--exclude-libs,ALL", f"-Wl,--version-script={exports}",
                "-o", f"{target}.tmp",
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"dspark-vllm: linking the native parser core failed:\n{done.stdout}{done.stderr}")
            os.replace(f"{target}.tmp", target)

        # The longest first, so that the two workers end together.
        work = sorted(((n, u) for n in todo for u in units), key=lambda item: -item[1].stat().st_size)
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(compile_one, work))
            list(pool.map(link, todo))
    # RE2's licence (BSD-3-Clause) goes with the libraries that carry its code.
    notice = OUT / "LICENSE-re2"
    if not notice.is_file():
        shutil.copyfile(re2_dir() / "LICENSE", notice)
    return [OUT / name for name in wanted]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--re2-dir"]:
        print(re2_dir())
    elif sys.argv[1:2] == ["--re2-archive"] and len(sys.argv) == 3:
        shutil.copy2(re2_archive(), sys.argv[2])
    else:
        for path in build(force="--force" in sys.argv, only_this_cpu="--only-this-cpu" in sys.argv):
            print(path, file=sys.stderr)
