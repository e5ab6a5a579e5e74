"""The recipes of README.md and docs/ run as written: every fenced block tagged ```` ```sql recipe ````
is run with `dspark-vllm sql`, after what its first line asks for (`-- needs: dspark-vllm simulate ARGS`: that
simulator, on a free port put in place of the one it names). It must end (a bounded table), print result
columns that have names (no EXPR$1), and say nothing on stderr but progress. Recipes whose needs this test does
not know are skipped with the reason; add a `-- needs:` kind here when you add such a recipe."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyflink")

from connector.simulator.cli import add_arguments, config_from_args  # noqa: E402
from connector.simulator.testing import serve_simulator  # noqa: E402

pytestmark = [pytest.mark.flink]

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"^```sql recipe[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def recipes() -> list[tuple[str, str]]:
    """(where, SQL) of every tagged block in README.md and docs/*.md."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{doc.relative_to(ROOT)}:{line}", match.group(1)))
    return found


def test_the_docs_have_recipes():
    """The marker is in use (a renamed marker would leave the test below with nothing to run)."""
    assert {where.split(":")[0] for where, _ in recipes()} >= {"README.md", "docs/flink.md"}


def _simulator_config(needs: str):  # type: ignore[no-untyped-def]
    """The simulator a `-- needs: dspark-vllm simulate ARGS` line asks for, and the port it names."""
    import argparse

    words = shlex.split(needs)
    if words[:2] != ["dspark-vllm", "simulate"]:
        pytest.skip(f"a recipe needs {needs!r}, which this test does not start")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(words[2:])
    return config_from_args(args), args.port


def _sql(script: Path, tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "connector.cli", "sql", str(script)]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path)}


@pytest.fixture
def prepared(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The recipe as a .sql file, its simulator running, the port in its text replaced by the simulator's."""
    where, sql = request.param
    first = sql.splitlines()[0]
    if not first.startswith("-- needs: "):
        pytest.skip(f"{where}: no '-- needs:' line, so this test does not know what the recipe runs against")
    config, port = _simulator_config(first[len("-- needs: ") :])
    with serve_simulator(config=config, mode="process") as sim:
        script = tmp_path / "recipe.sql"
        script.write_text(sql.replace(f"127.0.0.1:{port}", f"127.0.0.1:{sim.port}"), encoding="utf-8")
        yield script


@pytest.mark.parametrize("prepared", recipes(), ids=[where for where, _ in recipes()], indirect=True)
def test_a_recipe_runs_as_written(prepared: Path, tmp_path: Path):
    """The README's recipe named 'http://vllm:8000' (no word of it for minutes), never ended (no
    prompts.count) and printed columns named EXPR$1, EXPR$2, EXPR$3."""
    run = subprocess.run(_sql(prepared, tmp_path), capture_output=True, text=True, timeout=600, env=_env(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "EXPR$" not in run.stdout, run.stdout[:2000]
    header = next(line for line in run.stdout.splitlines() if line.startswith("| "))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    assert all(re.fullmatch(r"[a-z_][a-z0-9_]*", name) for name in names), names
    assert re.search(r"^\| +\+I \|", run.stdout, re.MULTILINE), run.stdout[-2000:]  # rows came out
    other = [line for line in run.stderr.splitlines() if " submitted job " not in line]
    assert not [line for line in other if "dspark-vllm" in line or "Exception" in line], run.stderr[-3000:]


def test_an_unreachable_endpoint_is_said_at_once_in_one_line(tmp_path: Path):
    """The README's recipe as it was, against 'http://vllm:8000' where no such host resolves: the job said
    nothing while its requests waited out their 5-minute deadline. Now one line names the host, what failed and
    what to check, while the job still runs (it is stopped then)."""
    where, sql = recipes()[0]
    script = tmp_path / "recipe.sql"
    script.write_text(re.sub(r"http://127\.0\.0\.1:\d+", "http://vllm:8000", sql), encoding="utf-8")
    proc = subprocess.Popen(_sql(script, tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(tmp_path))  # fmt: skip
    try:
        assert proc.stderr is not None
        said = []
        for line in proc.stderr:
            said.append(line)
            if line.startswith("dspark-vllm: endpoint "):
                break
        assert said and said[-1].startswith(
            "dspark-vllm: endpoint http://vllm:8000: the host 'vllm' does not resolve"
        ), said
        assert "check the host name in 'endpoint'" in said[-1]
        assert proc.poll() is None  # said while the requests wait, not when they fail
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
