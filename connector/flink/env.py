"""The connector's jar and a PyFlink environment that can use it (pyflink).

`use_connector(t_env)` adds the jar shipped in this package to the environment (`ADD JAR`: through it Flink
finds the 'dspark-vllm' table factory), sets 'python.client.executable' to this Python (the factory plans tables with
it) and, in a checkout that is not installed, ships `connector/` to the Python workers.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from py4j.protocol import Py4JJavaError
from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment, TableEnvironment, TableResult
from pyflink.util.exceptions import JavaException

from connector.errors import DsparkError, SchemaDiscoveryError
from connector.flink.pyflink_fixes import quiet_loopback_exit

__all__ = [
    "JAR_DIR",
    "add_jars",
    "connector_jar",
    "local_environment",
    "prompt_job",
    "register",
    "run_job",
    "run_job_script",
    "served_model",
    "use_connector",
]

# PyFlink starts its local worker pool when an environment is created: fixed before any is made here.
quiet_loopback_exit()

_PACKAGE = Path(__file__).resolve().parents[1]  # connector/
JAR_DIR = _PACKAGE / "flink" / "jars"
_shipped: dict[int, str] = {}
_added: dict[int, set[str]] = {}


def connector_jar() -> Path:
    """The jar of the 'dspark-vllm' table factory, built into this package by its build."""
    jars = sorted(JAR_DIR.glob("dspark-vllm-flink-*.jar"))
    if not jars:
        raise DsparkError(
            f"The dspark-vllm Flink jar is missing from {JAR_DIR}: it is built when the package is built "
            "(it needs a JDK 17 'javac'); reinstall with `pip install .` or build it with "
            "`python -m connector.flink.build`."
        )
    return jars[-1]


def _installed() -> bool:
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    return purelib in _PACKAGE.parents


def _ship_package(t_env: TableEnvironment) -> None:
    """Make `connector` importable by the Python workers where it is not installed (a checkout)."""
    if _installed() or id(t_env) in _shipped:
        return
    staging = Path(tempfile.mkdtemp(prefix="dspark-vllm-pyfiles-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "jars")
    shutil.copytree(_PACKAGE, staging / "connector", ignore=ignore)
    t_env.add_python_file(str(staging))
    _shipped[id(t_env)] = str(staging)


def add_jars(t_env: TableEnvironment, *jars: str | Path) -> TableEnvironment:
    """Add jars to `t_env` and its jobs (another connector, such as Flink's Kafka SQL connector), each once."""
    added = _added.setdefault(id(t_env), set())
    for jar in map(str, jars):
        if jar not in added:
            # ADD JAR, not 'pipeline.jars': Flink looks factories up in the environment's own class loader, made
            # when the environment was created; ADD JAR extends it (and ships the jar with the job).
            t_env.execute_sql("ADD JAR " + "'" + jar.replace("'", "''") + "'")
            added.add(jar)
    return t_env


def use_connector(t_env: TableEnvironment) -> TableEnvironment:
    """Let `t_env` use 'dspark-vllm' tables: the connector jar added to it, this Python for planning them."""
    config = t_env.get_config()
    add_jars(t_env, connector_jar())
    if not config.get("python.client.executable", ""):
        config.set("python.client.executable", sys.executable)
    _ship_package(t_env)
    return t_env


def register(t_env: TableEnvironment) -> TableEnvironment:
    """The name `use_connector` had before Flink found the connector by itself; kept for old programs."""
    return use_connector(t_env)


def local_environment(
    parallelism: int = 1, checkpoint_interval_ms: int | None = None
) -> tuple[StreamExecutionEnvironment, StreamTableEnvironment]:
    """A streaming table environment on the local mini-cluster, its workers on this interpreter."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    if checkpoint_interval_ms:
        env.enable_checkpointing(checkpoint_interval_ms, CheckpointingMode.AT_LEAST_ONCE)
    t_env = StreamTableEnvironment.create(env)
    config = t_env.get_config()
    if not config.get("python.executable", ""):
        config.set("python.executable", sys.executable)
    use_connector(t_env)
    return env, t_env


def served_model(endpoint: str) -> str:
    """The first model the endpoint serves (`served_models`: its first base URL's `/v1/models`): what a job asks
    when it is given no model. An endpoint that cannot be asked is a DsparkError of one line that says what to do."""
    from connector.options.endpoint import base_urls, root
    from connector.server.discovery import served_models

    models = served_models(endpoint)
    if not models:
        first = root(base_urls(endpoint)[0])
        raise SchemaDiscoveryError(f"{first}/v1/models lists no model: name the one to ask with --model")
    return models[0]


def prompt_job(
    name: str,
    description: str,
    argv: list[str] | None = None,
    more_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> tuple[argparse.Namespace, StreamTableEnvironment, str]:
    """The set-up of a job that sends prompts to an endpoint (jobs/responses.py, jobs/enrich.py): its arguments
    (`--endpoint`, `--model`, `--output`, `--concurrency`, `--checkpoint-interval`, `--detached`, `--parallelism`,
    `--option`
    KEY=VALUE pairs, and the job's
    own, added by `more_arguments`), the model (`--model`, else the endpoint's first), and a streaming table
    environment named 'dspark-vllm NAME' with exactly-once checkpoints and the connector. Returns all three."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--endpoint", required=True, help="OpenAI-compatible server")
    p.add_argument("--model", help="model to ask (default: the first of the endpoint's /v1/models)")
    if more_arguments is not None:
        more_arguments(p)
    p.add_argument("--output", required=True, help="output directory (CSV part files)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per parallel instance")
    p.add_argument("--checkpoint-interval", type=float, default=10.0, help="seconds; 0 turns checkpoints off")
    p.add_argument("--detached", action="store_true", help="return once submitted (with `flink run -d`)")
    p.add_argument(
        "--parallelism", type=int, default=None, help="the job's parallelism (default: the cluster's default)"
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_key_value,
        help="another option of the job's 'dspark-vllm' model or table (repeatable)",
    )
    args = p.parse_args(argv)
    model = args.model or served_model(args.endpoint)
    env = StreamExecutionEnvironment.get_execution_environment()
    if args.parallelism is not None:
        env.set_parallelism(args.parallelism)
    if args.checkpoint_interval > 0:
        env.enable_checkpointing(int(args.checkpoint_interval * 1000), CheckpointingMode.EXACTLY_ONCE)
    t_env = StreamTableEnvironment.create(env)
    t_env.get_config().set("pipeline.name", f"dspark-vllm {name}")
    # uids on every stateful step (the sink's, the request step's), so a savepoint restores into a rescaled job
    t_env.get_config().set("table.exec.uid.generation", "ALWAYS")
    use_connector(t_env)
    return args, t_env, model


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def run_job(name: str, result: TableResult, detached: bool) -> int:
    """Prints 'NAME: job ID' (what a script that submits the job reads) and, unless `detached`, waits for it."""
    client = result.get_job_client()
    if client is not None:
        print(f"{name}: job {client.get_job_id()}", flush=True)
    if not detached:
        result.wait()
    return 0


def run_job_script(name: str, job: Callable[[], int], verbose: bool = False) -> int:
    """The exit status of a job's script (jobs/*.py) as a `dspark-vllm` command's (`connector.cli.run_reported`):
    what goes wrong is one line "NAME: ...", a failure of Flink's said by its root cause."""
    from connector.cli import run_reported

    def said() -> int:
        with flink_failures_said():
            return job()

    return run_reported(name, said, verbose)


@contextlib.contextmanager
def flink_failures_said() -> Iterator[None]:
    """Inside, a failure of Flink's (a Java exception through py4j, or PyFlink's copy of one, whose text is the
    whole Java trace) is raised as a DsparkError of one line: "the job failed: " and the root cause's message."""
    try:
        yield
    except Py4JJavaError as exc:
        raise DsparkError(f"the job failed: {java_failure(exc.java_exception)}") from None
    except JavaException as exc:
        raise DsparkError(f"the job failed: {_root_of_trace(str(exc))}") from None


def cancelled(java_exception) -> bool:  # type: ignore[no-untyped-def]
    """Whether a Java exception (through py4j) was caused by the job's cancellation, at any depth."""
    while java_exception is not None:
        if java_exception.getClass().getName() == "org.apache.flink.runtime.client.JobCancellationException":
            return True
        java_exception = java_exception.getCause()
    return False


def java_failure(java_exception) -> str:  # type: ignore[no-untyped-def]
    """What a Java exception (through py4j) says at its root: the first line of the deepest cause's message."""
    root = java_exception
    while root.getCause() is not None and root.getCause() is not root:
        root = root.getCause()
    message = str(root.getMessage() or "").strip().splitlines()
    return message[0] if message else str(root.getClass().getSimpleName())


def _root_of_trace(trace: str) -> str:
    """`java_failure` of a Java trace as text: the deepest "Caused by: CLASS: message" line's message."""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    root = causes[-1] if causes else (lines[0] if lines else "")
    kind, sep, message = root.partition(": ")
    return message.strip() if sep and "." in kind and " " not in kind else root
