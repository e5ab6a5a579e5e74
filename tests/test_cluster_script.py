"""jobs/standalone_cluster.sh before any cluster: a Python it cannot use is said in one line that says what to
do, not a traceback (no cluster is started; seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import SCRIPT


def _run(tmp_path: Path, python: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DSPARK_PYTHON": python, "DSPARK_CLUSTER_DIR": str(tmp_path / "cluster")}
    return subprocess.run(
        ["bash", str(SCRIPT), "status"], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_python_without_pyflink_is_one_line(tmp_path: Path) -> None:
    # This interpreter without its site-packages: the Python of a shell whose venv is not activated.
    bare = tmp_path / "python-without-pyflink"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    result = _run(tmp_path, str(bare))
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"{bare} cannot import pyflink" in result.stderr
    assert "DSPARK_PYTHON" in result.stderr and "activate" in result.stderr


def test_a_python_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    result = _run(tmp_path, "no-such-python3")
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert "no-such-python3" in result.stderr and "DSPARK_PYTHON" in result.stderr


def test_status_with_this_python(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    result = _run(tmp_path, sys.executable)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("FLINK_HOME=")
