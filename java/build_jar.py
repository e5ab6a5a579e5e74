"""Compile the 'dspark-vllm' Flink connector jar into connector/flink/jars/ (no dependencies but a JDK).

The package build runs this (java/backend.py); in a checkout, `python java/build_jar.py` rebuilds it. The
classes compile against the Flink jars that the `apache-flink-libraries` wheel carries (pyflink/lib, /opt),
which the build installs: no Maven repository is needed.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "java" / "src" / "main"
OUTPUT = ROOT / "connector" / "flink" / "jars"
RELEASE = "11"  # Flink 2.x runs on Java 11, 17 and 21


def flink_jars() -> list[Path]:
    spec = importlib.util.find_spec("pyflink")
    locations = list(spec.submodule_search_locations or []) if spec else []
    jars = [j for location in locations for folder in ("lib", "opt") for j in Path(location, folder).glob("*.jar")]
    if not jars:
        raise SystemExit("dspark-vllm: no Flink jars to compile against; install apache-flink-libraries==2.3.0 first")
    return jars


def javac() -> str:
    found = shutil.which("javac") or (
        str(Path(os.environ["JAVA_HOME"], "bin", "javac")) if os.environ.get("JAVA_HOME") else None
    )
    if not found or not Path(found).exists():
        raise SystemExit(
            "dspark-vllm: building the package compiles its Flink connector jar, which needs a JDK (11 or later) "
            "with 'javac' on PATH or under JAVA_HOME; install one (e.g. apt-get install openjdk-17-jdk-headless)"
        )
    return found


NATIVE = ROOT / "connector" / "_native"
SHIM_SOURCE = ROOT / "native" / "jni" / "dspark_jni.c"
SHIM = "libdspark-jni.so"
# Where the jar carries the native core and its JNI shim (io.dspark.vllm.parse.NativeCore loads them).
NATIVE_IN_JAR = "io/dspark/vllm/native/linux-x86_64/"


def java_home() -> Path:
    """The JDK that `javac` belongs to (its include/ has jni.h)."""
    return Path(javac()).resolve().parent.parent


def build_shim() -> Path:
    """Compile the JNI shim (native/jni/dspark_jni.c: C, JNI headers from the JDK) into connector/_native/."""
    target = NATIVE / SHIM
    inputs = [SHIM_SOURCE, ROOT / "native" / "dspark_core.h", Path(__file__)]
    if target.is_file() and target.stat().st_mtime >= max(p.stat().st_mtime for p in inputs):
        return target
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
    if not cc:
        raise SystemExit(
            "dspark-vllm: no C compiler found to build the JNI shim of the native core; install gcc or set CC"
        )
    include = java_home() / "include"
    if not (include / "jni.h").is_file():
        raise SystemExit(f"dspark-vllm: the JDK at {java_home()} has no include/jni.h; install a full JDK (not a JRE)")
    NATIVE.mkdir(parents=True, exist_ok=True)
    command = [
        cc, "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=default", f"-I{include}", f"-I{include / 'linux'}",
        str(SHIM_SOURCE), "-ldl", "-o", f"{target}.tmp",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dspark-vllm: compiling the JNI shim failed:\n{done.stdout}{done.stderr}")
    os.replace(f"{target}.tmp", target)
    return target


def native_files() -> list[Path]:
    """The native core's builds (native/build_native.py, run first) and the JNI shim, for the jar."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    cores = sorted(NATIVE.glob("libdspark-*.so"))
    cores = [c for c in cores if c.name != SHIM]
    if not cores:
        raise SystemExit("dspark-vllm: the native core is not built; run python native/build_native.py first")
    return [*cores, build_shim()]


def version() -> str:
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise SystemExit("dspark-vllm: no version in pyproject.toml")


def build() -> Path:
    """Compile the classes and write connector/flink/jars/dspark-vllm-flink-<version>.jar."""
    sources = sorted((SOURCES / "java").rglob("*.java"))
    classpath = os.pathsep.join(str(j) for j in flink_jars())
    with tempfile.TemporaryDirectory(prefix="dspark-vllm-javac-") as tmp:
        classes = Path(tmp)
        command = [javac(), "--release", RELEASE, "-nowarn", "-d", str(classes), "-cp", classpath]
        done = subprocess.run([*command, *map(str, sources)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"dspark-vllm: javac failed:\n{done.stdout}{done.stderr}")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        for old in OUTPUT.glob("dspark-vllm-flink-*.jar"):
            old.unlink()
        jar = OUTPUT / f"dspark-vllm-flink-{version()}.jar"
        with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: dspark-vllm\n\n")
            for tree in (classes, SOURCES / "resources"):
                for path in sorted(tree.rglob("*")):
                    if path.is_file():
                        out.write(path, path.relative_to(tree).as_posix())
            for path in native_files():
                out.write(path, NATIVE_IN_JAR + path.name)
    return jar


TESTS = ROOT / "java" / "src" / "test" / "java"
TEST_MAIN = "io.dspark.vllm.request.RequesterTests"


def java() -> str:
    found = shutil.which("java") or (
        str(Path(os.environ["JAVA_HOME"], "bin", "java")) if os.environ.get("JAVA_HOME") else None
    )
    if not found or not Path(found).exists():
        raise SystemExit("dspark-vllm: running the Java tests needs 'java' on PATH or under JAVA_HOME")
    return found


def java_tests(*select: str, timeout_s: float = 300.0, main: str = TEST_MAIN) -> subprocess.CompletedProcess[str]:
    """Compile the main classes and java/src/test (at the build's --release) into a temporary folder and run
    the tests' runner (`python java/build_jar.py test [name]`); its last line is "N passed, M failed". `main`:
    another class of java/src/test to run with `select` as its arguments (the contract's check)."""
    sources = sorted((SOURCES / "java").rglob("*.java")) + sorted(TESTS.rglob("*.java"))
    with tempfile.TemporaryDirectory(prefix="dspark-vllm-javatest-") as tmp:
        classes = Path(tmp)
        classpath = os.pathsep.join([str(classes), *(str(j) for j in flink_jars())])
        command = [javac(), "--release", RELEASE, "-nowarn", "-d", str(classes), "-cp", classpath]
        done = subprocess.run([*command, *map(str, sources)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"dspark-vllm: javac failed:\n{done.stdout}{done.stderr}")
        native_files()
        run = [java(), "-Xmx512m", f"-Ddspark.native.dir={NATIVE}", "-cp", classpath, main, *select]
        return subprocess.run(run, capture_output=True, text=True, timeout=timeout_s)


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) >= 3:  # another main of java/src/test, e.g. RequesterBench
        result = java_tests(*sys.argv[3:], main=sys.argv[2], timeout_s=3600.0)
        print(result.stdout, end="")
        print(result.stderr, end="", file=sys.stderr)
        sys.exit(result.returncode)
    if sys.argv[1:2] == ["test"]:
        result = java_tests(*sys.argv[2:3])
        print(result.stdout, end="")
        print(result.stderr, end="", file=sys.stderr)
        sys.exit(result.returncode)
    print(build(), file=sys.stderr)
