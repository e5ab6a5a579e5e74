"""Compile the 'dspark-vllm' Flink connector jar into connector/flink/jars/ (no dependencies but a JDK).

The package build runs this (java/backend.py); in a checkout, `python java/build_jar.py` rebuilds it. The
classes compile against the Flink jars that the `apache-flink-libraries` wheel carries (pyflink/lib, /opt),
which the build installs, and kafka-clients (the Kafka response store, io.dspark.vllm.store.KafkaStore): its
jar, pinned by sha256, is fetched once from Maven Central (DSPARK_VLLM_MAVEN_REPOSITORY, a mirror, else Central)
into the cache of native/build_native.py (the same function as RE2's tarball) and its classes go into the jar,
so a TaskManager needs nothing beside it; no Maven is needed. `python java/build_jar.py --kafka-clients-jar DIR`
puts the pinned jar into DIR (the image build's context: docker/standin/build.sh). The tests of java/src/test
run on JUnit 5, which `junit_tests` fetches from Maven Central (deploy/maven/junit.pom.xml); the jar never needs it.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "java" / "src" / "main"
OUTPUT = ROOT / "connector" / "flink" / "jars"
RELEASE = "11"  # Flink 2.x runs on Java 11, 17 and 21
# kafka-clients, the version of the tests' broker (deploy/maven/kafka-broker.pom.xml). Apache-2.0. Its classes go
# into the jar unrelocated; the lz4, snappy and zstd codecs it can use are not bundled (the store produces
# uncompressed records; gzip is the JDK's).
KAFKA_CLIENTS = "org/apache/kafka/kafka-clients/4.4.0/kafka-clients-4.4.0.jar"
KAFKA_CLIENTS_SHA256 = "1ab07317eb6633241392449d329dbdc5d9251e6ffc4926860f42dd966e88bdf9"


def _build_native():  # native/build_native.py, for its cache and pinned fetch (one owner of both)
    spec = importlib.util.spec_from_file_location("dspark_build_native", ROOT / "native" / "build_native.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kafka_clients_jar() -> Path:
    """The pinned kafka-clients jar in the cache, fetched from Maven Central (or DSPARK_VLLM_MAVEN_REPOSITORY)."""
    repository = os.environ.get("DSPARK_VLLM_MAVEN_REPOSITORY") or "https://repo1.maven.org/maven2"
    url = f"{repository.rstrip('/')}/{KAFKA_CLIENTS}"
    return _build_native().fetch_pinned(url, KAFKA_CLIENTS_SHA256, "kafka-clients 4.4.0")


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


def require_current_plan_records() -> None:
    """The jar's plan records and reader (java/.../plan) must be what connector/plan/records.py makes: a build
    from a stale one stops with one line saying how to regenerate them. The module is read by its path (standard
    library only), so the build needs no installed package."""
    name = "dspark_vllm_plan_records"
    spec = importlib.util.spec_from_file_location(name, ROOT / "connector" / "plan" / "records.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses reads the module's names
    try:
        spec.loader.exec_module(module)
        folder = SOURCES / "java" / "io" / "dspark" / "vllm" / "plan"
        stale = [n for n, text in module.java_sources().items() if _text(folder / n) != text]
    finally:
        del sys.modules[name]
    if stale:
        where = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
        raise SystemExit(
            f"dspark-vllm: {', '.join(stale)} in {where} is stale: run python -m connector.plan.records --java {where}"
        )


def _text(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def build() -> Path:
    """Compile the classes and write connector/flink/jars/dspark-vllm-flink-<version>.jar."""
    _build_native().require_current_contract()  # the core's generated contract files, current
    require_current_plan_records()
    sources = sorted((SOURCES / "java").rglob("*.java"))
    kafka = kafka_clients_jar()
    classpath = os.pathsep.join(str(j) for j in [*flink_jars(), kafka])
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
            written = set()
            for tree in (classes, SOURCES / "resources"):
                for path in sorted(tree.rglob("*")):
                    if path.is_file():
                        out.write(path, path.relative_to(tree).as_posix())
                        written.add(path.relative_to(tree).as_posix())
            for path in native_files():
                out.write(path, NATIVE_IN_JAR + path.name)
            with zipfile.ZipFile(kafka) as clients:
                for entry in clients.infolist():
                    name = entry.filename
                    if entry.is_dir() or name in written or name == "META-INF/MANIFEST.MF":
                        continue
                    if name.startswith("META-INF/") and name.endswith((".SF", ".RSA", ".DSA")):
                        continue
                    renamed = {"LICENSE": "META-INF/LICENSE-kafka-clients", "NOTICE": "META-INF/NOTICE-kafka-clients"}
                    out.writestr(renamed.get(name, name), clients.read(name))
    return jar


TESTS = ROOT / "java" / "src" / "test" / "java"
# The JUnit 5 tests of java/src/test.
TEST_CLASSES = (
    "io.dspark.vllm.request.RequesterTests",
    "io.dspark.vllm.request.ReplicasTest",
    "io.dspark.vllm.request.RecentTest",
    "io.dspark.vllm.engine.ReplicaMetricsTest",
    "io.dspark.vllm.engine.ParseOperatorTest",
    "io.dspark.vllm.engine.CompletionsTest",
    "io.dspark.vllm.engine.ModelFaultsTest",
    "io.dspark.vllm.sql.FileLinesTest",
    "io.dspark.vllm.sql.PythonParseStepTest",
    "io.dspark.vllm.sql.SecretsTest",
    "io.dspark.vllm.parse.NativeBoundaryTest",
    "io.dspark.vllm.store.FileSystemStoreTest",
    "io.dspark.vllm.request.StoredRequestsTest",
)


def java() -> str:
    found = shutil.which("java") or (
        str(Path(os.environ["JAVA_HOME"], "bin", "java")) if os.environ.get("JAVA_HOME") else None
    )
    if not found or not Path(found).exists():
        raise SystemExit("dspark-vllm: running the Java tests needs 'java' on PATH or under JAVA_HOME")
    return found


def junit_jars() -> list[Path]:
    """JUnit 5's console launcher (standalone: the Jupiter API and engine inside) and Flink's operator test
    harnesses, from Maven Central through deploy/maven/fetch.sh (the sets junit and flink-test-harness, cached).
    Only the tests need them, never the jar."""
    fetch = ROOT / "deploy" / "maven" / "fetch.sh"
    jars = []
    for name in ("junit", "flink-test-harness"):
        done = subprocess.run(["bash", str(fetch), name], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"fetch.sh {name} failed")
        jars += sorted(Path(done.stdout.strip()).glob("*.jar"))
    return jars


def _compile_tests(classes: Path, junit: bool) -> str:
    """Compile the main classes and java/src/test (at the build's --release) into `classes`; the classpath.
    Without `junit`, the JUnit tests are left out (the programs of java/src/test need no Maven)."""
    tests = [t for t in sorted(TESTS.rglob("*.java")) if junit or "org.junit" not in t.read_text()]
    sources = sorted((SOURCES / "java").rglob("*.java")) + tests
    jars = [*flink_jars(), kafka_clients_jar(), *(junit_jars() if junit else [])]
    classpath = os.pathsep.join([str(classes), *(str(j) for j in jars)])
    command = [javac(), "--release", RELEASE, "-nowarn", "-d", str(classes), "-cp", classpath]
    done = subprocess.run([*command, *map(str, sources)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dspark-vllm: javac failed:\n{done.stdout}{done.stderr}")
    native_files()
    return classpath


def java_tests(*args: str, main: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run `main`, a class of java/src/test that is a program (the contract's and the native core's checks, the
    benchmarks), with `args`, in a JVM with the jar's classes, Flink's jars, the native core and this Python (the
    planner's, for what the core reads: PythonPlan)."""
    with tempfile.TemporaryDirectory(prefix="dspark-vllm-javatest-") as tmp:
        classpath = _compile_tests(Path(tmp), junit=False)
        run = [
            java(), "-Xmx512m", f"-Ddspark.native.dir={NATIVE}", f"-Ddspark.python={sys.executable}", "-cp", classpath,
            main, *args,
        ]  # fmt: skip
        return subprocess.run(run, capture_output=True, text=True, timeout=timeout_s)


@dataclass
class JUnitReport:
    """What JUnit's console launcher ran: its XML report's counts, each test's verdict, and its output."""

    tests: int
    failures: int
    errors: int
    skipped: int
    verdicts: dict[str, str]  # "Class.method" -> "passed", "failed", "error" or "skipped"
    output: str
    returncode: int

    def summary(self) -> str:
        passed = self.tests - self.failures - self.errors - self.skipped
        return (
            f"JUnit: {self.tests} tests, {passed} passed, {self.failures} failed, {self.errors} errors, "
            f"{self.skipped} skipped"
        )


def junit_tests(*classes: str, select: str | None = None, timeout_s: float = 900.0) -> JUnitReport:
    """Run JUnit 5 tests of java/src/test (`classes`, default all of TEST_CLASSES; `select`: only the methods
    whose name contains it) with the console launcher, and read its XML report (`python java/build_jar.py test`)."""
    with tempfile.TemporaryDirectory(prefix="dspark-vllm-junit-") as tmp:
        compiled, reports = Path(tmp, "classes"), Path(tmp, "reports")
        compiled.mkdir()
        classpath = _compile_tests(compiled, junit=True)
        launcher = [
            java(), "-Xmx512m", f"-Ddspark.native.dir={NATIVE}", f"-Ddspark.python={sys.executable}", "-cp", classpath,
            "org.junit.platform.console.ConsoleLauncher", "execute", "--disable-banner", "--disable-ansi-colors",
            "--details=tree", f"--reports-dir={reports}",
        ]  # fmt: skip
        if select:
            launcher.append(f"--include-methodname=.*{re.escape(select)}.*")
        launcher += [f"--select-class={c}" for c in classes or TEST_CLASSES]
        done = subprocess.run(launcher, capture_output=True, text=True, timeout=timeout_s)
        xml_report = reports / "TEST-junit-jupiter.xml"
        if not xml_report.is_file():
            raise SystemExit(f"dspark-vllm: JUnit wrote no report:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
        suite = ElementTree.parse(xml_report).getroot()
        verdicts = {}
        for case in suite.iter("testcase"):
            found = [tag for tag in ("failure", "error", "skipped") if case.find(tag) is not None]
            name = (case.get("name") or "").removesuffix("()")  # Jupiter names a method test01Foo()
            verdicts[f"{case.get('classname')}.{name}"] = found[0] if found else "passed"
    return JUnitReport(
        tests=int(suite.get("tests", 0)),
        failures=int(suite.get("failures", 0)),
        errors=int(suite.get("errors", 0)),
        skipped=int(suite.get("skipped", 0)),
        verdicts=verdicts,
        output=done.stdout + done.stderr,
        returncode=done.returncode,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) >= 3:  # another main of java/src/test, e.g. RequesterBench
        result = java_tests(*sys.argv[3:], main=sys.argv[2], timeout_s=3600.0)
        print(result.stdout, end="")
        print(result.stderr, end="", file=sys.stderr)
        sys.exit(result.returncode)
    if sys.argv[1:2] == ["--kafka-clients-jar"] and len(sys.argv) == 3:
        shutil.copy2(kafka_clients_jar(), sys.argv[2])
        sys.exit(0)
    if sys.argv[1:2] == ["test"]:  # the JUnit tests; `test NAME`: those whose method name contains NAME
        report = junit_tests(select=sys.argv[2] if len(sys.argv) > 2 else None)
        print(report.output, end="")
        print(report.summary())
        sys.exit(0 if report.returncode == 0 and report.tests > 0 else 1)
    print(build(), file=sys.stderr)
