"""Flink settings our functions need, the package shipped to Python workers, a local environment (pyflink)."""

from __future__ import annotations

import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment, TableEnvironment

from connector.options import ARROW_BATCH, BUNDLE_SIZE, BUNDLE_TIME, Options

__all__ = ["apply_settings", "local_environment", "ship_package"]

_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds connector/ (and schemas/ in a checkout)
_shipped: dict[int, str] = {}


def _installed() -> bool:
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    return purelib in (_ROOT, *_ROOT.parents)


def ship_package(t_env: TableEnvironment) -> str | None:
    """Make `connector` importable by the Python workers, also where it is not installed (a checkout).

    A copy of `connector/` (built-in profiles included) goes into a temporary directory that is added to `python.files`
    (it precedes site-packages on the workers, so a checkout wins over an older installed copy).
    """
    if _installed():
        return None
    config = t_env.get_config()
    if id(t_env) in _shipped:
        return _shipped[id(t_env)]
    staging = Path(tempfile.mkdtemp(prefix="dspark-vllm-pyfiles-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(_ROOT / "connector", staging / "connector", ignore=ignore)
    existing = config.get("python.files", "")
    config.set("python.files", ",".join(p for p in (existing, str(staging)) if p))
    _shipped[id(t_env)] = str(staging)
    return str(staging)


def _is_set(t_env: TableEnvironment, key: str) -> bool:
    return bool(t_env.get_config().get_configuration().contains_key(key))


def apply_settings(t_env: TableEnvironment, options: Options) -> None:
    """Bundle and Arrow batch sizes for large parse batches: a table option wins, then the job's own
    configuration, then our default (the table's 'parse.batch-size')."""
    config = t_env.get_config()
    wanted = {
        BUNDLE_SIZE: str(options.bundle_size),
        ARROW_BATCH: str(options.arrow_batch_size),
        BUNDLE_TIME: str(int(options[BUNDLE_TIME] * 1000)),  # a long (ms) in PyFlink, not a duration
    }
    for key, value in wanted.items():
        if options.is_set(key) or not _is_set(t_env, key):
            config.set(key, value)


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
    if not _is_set(t_env, "python.executable"):
        config.set("python.executable", sys.executable)
    return env, t_env
