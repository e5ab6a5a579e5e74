"""The command line keeps Unix conventions: `-` is stdout, streams are appended to, a closed pipe
ends quietly, every subcommand exits as the README says on every signal, errors are one line (argparse's too),
an output's name matches its format, a misspelt option gets the nearest names, `sql` leaves no log behind but
the one it names on failure. Real processes, real servers on 127.0.0.1, real signals."""

from __future__ import annotations

import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connector.simulator.testing import serve_simulator
from tests.bodies import chat, encode
from tests.cluster import wait_for

CLI = [sys.executable, "-m", "connector.cli"]
ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess[bytes]:  # type: ignore[no-untyped-def]
    kwargs.setdefault("capture_output", True)
    return subprocess.run([*CLI, *args], cwd=cwd, timeout=120, env=_env(), **kwargs)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def one_line(err: bytes | str) -> str:
    text = err.decode() if isinstance(err, bytes) else err
    assert "Traceback" not in text and text.count("\n") == 1, text
    return text.strip()


@pytest.fixture
def bodies(tmp_path: Path) -> Path:
    source = tmp_path / "in.ndjson"
    source.write_bytes(encode(chat(id="a")) + b"\n" + b"garbage\n")
    return source


# -- outputs: `-`, streams, names -------------------------------------------------------------------------------


def test_dash_is_stdout_for_either_output(tmp_path: Path, bodies: Path):
    """`--errors -` wrote a file named '-'."""
    work = tmp_path / "work"
    work.mkdir()
    proc = run("parse", str(bodies), "--backend", "cpu", "--output", "o.parquet", "--errors", "-", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["body"] for line in proc.stdout.decode().splitlines()] == ["garbage"]
    assert sorted(p.name for p in work.iterdir()) == ["o.parquet"]
    proc = run("parse", str(bodies), "--backend", "cpu", "--output", "-", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(io.BytesIO(proc.stdout)).column("id").to_pylist() == ["a"]
    proc = run("parse", str(bodies), "--backend", "cpu", "--output", "-", "--errors", "-", cwd=work)
    assert proc.returncode == 2 and "is the --output file" in one_line(proc.stderr)
    # Parquet is not written to a terminal.
    import pty

    controller, terminal = pty.openpty()
    try:
        proc = run("parse", str(bodies), "--backend", "cpu", "--output", "-", cwd=work, stdout=terminal,
                   stderr=subprocess.PIPE, capture_output=False)  # fmt: skip
    finally:
        os.close(terminal)
        os.close(controller)
    assert proc.returncode == 2
    assert one_line(proc.stderr).endswith(
        "--output -: stdout is a terminal and Parquet is binary: redirect it, or give a file"
    )


@pytest.mark.parametrize("name", ["/dev/stdout", "-"])
def test_a_stream_is_appended_to_never_truncated(tmp_path: Path, bodies: Path, name: str):
    """`{ echo before; dspark-vllm parse ... --errors /dev/stdout; echo after; } > f`: what the shell wrote
    before was overwritten (/dev/stdout was opened anew, truncating the file)."""
    captured = tmp_path / "captured"
    with captured.open("wb") as stdout:
        stdout.write(b"before\n")
        stdout.flush()
        proc = run(
            "parse", str(bodies), "--backend", "cpu", "--output", str(tmp_path / "o.parquet"), "--errors", name,
            stdout=stdout, stderr=subprocess.PIPE, capture_output=False,
        )  # fmt: skip
        stdout.write(b"after\n")
    assert proc.returncode == 0, proc.stderr
    lines = captured.read_bytes().decode().splitlines()
    assert lines[0] == "before" and lines[-1] == "after" and len(lines) == 3, lines
    assert json.loads(lines[1])["body"] == "garbage"


@pytest.mark.parametrize(
    "flag,name,message",
    [
        ("--output", "r.csv", "--output r.csv: give a name ending in .parquet (or - for stdout)"),
        ("--output", "r", "--output r: give a name ending in .parquet (or - for stdout)"),
        ("--errors", "e.txt", "--errors e.txt: give a name ending in .ndjson or .jsonl or .parquet (or - for stdout)"),
    ],
)
def test_an_outputs_name_must_match_its_format(tmp_path: Path, bodies: Path, flag: str, name: str, message: str):
    """`parse --output r.csv` silently wrote Parquet into r.csv."""
    paths = {"--output": "o.parquet", "--errors": "e.ndjson", flag: name}
    proc = run("parse", str(bodies), "--backend", "cpu", "--output", paths["--output"], "--errors", paths["--errors"],
               cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert one_line(proc.stderr) == f"dspark-vllm parse: {message}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.ndjson"]
    for errors in ("e.jsonl", "e.PARQUET"):
        assert run("parse", str(bodies), "--backend", "cpu", "--output", "o.parquet", "--errors", errors,
                   cwd=tmp_path).returncode == 0  # fmt: skip
    assert pq.read_table(tmp_path / "e.PARQUET").column("line").to_pylist() == [2]


# -- a closed pipe ------------------------------------------------------------------------------------------------


def closed_pipe() -> int:
    """The write end of a pipe whose read end is closed: a reader that went away (`| head`)."""
    read, write = os.pipe()
    os.close(read)
    return write


def test_a_closed_pipe_ends_quietly(tmp_path: Path, bodies: Path):
    """`dspark-vllm columns ... | head -8` ended in a BrokenPipeError traceback; so did `parse --errors -`. Now
    nothing is said, the status is a SIGPIPE death's (141), and no temporary file stays."""
    bodies.write_bytes(b"garbage\n" * 50_000)
    write = closed_pipe()
    try:
        proc = run("parse", str(bodies), "--backend", "cpu", "--output", "o.parquet", "--errors", "-",
                   cwd=tmp_path, stdout=write, stderr=subprocess.PIPE, capture_output=False)  # fmt: skip
        assert (proc.returncode, proc.stderr) == (141, b"")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.ndjson"]
        with serve_simulator(profiles=("coder",)) as sim:
            proc = run("columns", "--endpoint", sim.url, stdout=write, stderr=subprocess.PIPE, capture_output=False)
        assert proc.returncode == 141 and b"Traceback" not in proc.stderr and b"Error" not in proc.stderr
    finally:
        os.close(write)


# -- exit status per subcommand and signal ------------------------------------------------------------------------


def interruptible() -> None:
    """In the child, before it runs: SIGINT to its default, as a terminal's Ctrl-C finds it. A shell without job
    control starts a background command with SIGINT ignored (`bash .ci/run &`), and Python keeps an ignored
    SIGINT ignored: the command under test would then never see the signal these tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_with(proc: subprocess.Popen[bytes], signum: int, expected_line: str) -> None:
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    assert one_line(err[err.rfind(b"dspark-vllm ") :]) == expected_line, err


SIGNALS = [
    (signal.SIGINT, "interrupted"),
    (signal.SIGTERM, "terminated (SIGTERM)"),
    (signal.SIGHUP, "terminated (SIGHUP)"),
]


@pytest.mark.parametrize("signum,said", SIGNALS)
def test_simulate_exits_as_the_readme_says_on_each_signal(signum: int, said: str):
    """`simulate` exited 0 on SIGINT and SIGTERM (the README promises 130 and 143), and died on SIGHUP."""
    proc = subprocess.Popen(preexec_fn=interruptible, args=[*CLI, "simulate", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env())  # fmt: skip
    try:
        assert proc.stdout is not None
        assert b"listening on http://127.0.0.1:" in proc.stdout.readline()
        stop_with(proc, signum, f"dspark-vllm simulate: {said}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """A server on 127.0.0.1 that takes connections and never answers (requests wait on it)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server


@pytest.mark.parametrize("signum,said", SIGNALS)
def test_schema_and_parse_exit_as_the_readme_says_on_each_signal(
    tmp_path: Path, silent_server: socket.socket, signum: int, said: str
):
    """`columns` waiting for a server, `parse` reading a stdin that stays open: 130, 143, 129, one line each."""
    proc = subprocess.Popen(preexec_fn=interruptible, args=[*CLI, "columns", "--endpoint", _url(silent_server), "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())  # fmt: skip
    try:
        wait_for("the command to connect", lambda: _has_connected(silent_server), timeout=60, every=0.05)
        stop_with(proc, signum, f"dspark-vllm columns: {said}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    proc = subprocess.Popen(preexec_fn=interruptible, args=[*CLI, "parse", "-", "--backend", "cpu", "--output", str(tmp_path / "o.parquet")],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())  # fmt: skip
    try:
        assert proc.stdin is not None
        proc.stdin.write(encode(chat()) + b"\n")
        proc.stdin.flush()
        wait_for("a partial output", lambda: list(tmp_path.glob(".*.partial")), timeout=60, every=0.05)
        proc.send_signal(signum)
        err = proc.stderr.read() if proc.stderr else b""
        assert proc.wait(timeout=60) == 128 + signum, err
        assert one_line(err) == f"dspark-vllm parse: {said}"
        assert list(tmp_path.iterdir()) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()


@pytest.mark.slow
@pytest.mark.parametrize("signum,said", SIGNALS)
def test_bench_exits_as_the_readme_says_on_a_signal(signum: int, said: str):
    proc = subprocess.Popen(preexec_fn=interruptible, args=[*CLI, "bench", "parse", "--no-flink", "--bodies", "20000", "--repeat", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())  # fmt: skip
    try:
        assert proc.stderr is not None
        while b"measured " not in proc.stderr.readline():  # it is measuring
            assert proc.poll() is None
        stop_with(proc, signum, f"dspark-vllm bench: {said}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_INTERRUPTED_MID_CONSTRUCTION = """
import asyncio, signal, sys
from connector.cli.signals import run_reported

class Loop:  # as asyncio's loop when the signal lands inside its __init__: __del__ meets a half-built object
    def __init__(self):
        signal.raise_signal(signal.%s)
        self.handlers = {}
    def __del__(self):
        self.handlers.clear()

async def ask():
    pass

def command():
    coroutine = ask()  # made, never awaited: the signal came first
    Loop()
    return 0

sys.exit(run_reported("dspark-vllm columns", command))
"""


@pytest.mark.parametrize("signum,said", SIGNALS)
def test_a_signal_inside_a_constructor_still_ends_in_one_line(signum: int, said: str):
    """CI saw a SIGHUP land inside asyncio's event loop constructor: the half-built loop's `__del__` and the
    coroutine never awaited printed a traceback and a warning after the command's one line."""
    script = _INTERRUPTED_MID_CONSTRUCTION % signal.Signals(signum).name
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=_env(), preexec_fn=interruptible, timeout=60
    )
    assert done.returncode == 128 + signum, done.stderr
    assert one_line(done.stderr) == f"dspark-vllm columns: {said}"


_INTERRUPTED_AS_THE_OUTPUT_IS_MADE = """
import signal, sys, tempfile
from connector.cli.commands import main

made = tempfile.mkstemp

def mkstemp(*args, **kwargs):
    handle, name = made(*args, **kwargs)
    signal.raise_signal(signal.%s)  # the temporary file is there; the command does not know it yet
    return handle, name

tempfile.mkstemp = mkstemp
sys.exit(main(["parse", "-", "--backend", "cpu", "--output", sys.argv[1]]))
"""


@pytest.mark.parametrize("signum,said", SIGNALS)
def test_a_signal_as_an_output_is_made_leaves_no_temporary_file(tmp_path: Path, signum: int, said: str):
    """The parse test's signal, sent once a partial output shows, can land between the temporary file's making
    and the command's noting it (in Output's constructor): the .partial file stayed."""
    script = _INTERRUPTED_AS_THE_OUTPUT_IS_MADE % signal.Signals(signum).name
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "o.parquet")], input=b"", capture_output=True,
                          env=_env(), preexec_fn=interruptible, timeout=60)  # fmt: skip
    assert done.returncode == 128 + signum, done.stderr
    assert one_line(done.stderr) == f"dspark-vllm parse: {said}"
    assert list(tmp_path.iterdir()) == []


def _url(server: socket.socket) -> str:
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def _has_connected(server: socket.socket) -> bool:
    """Whether a client's connection waits on `server` (the command is asking it, past its imports and its event
    loop's start; a socket of its own, such as the loop's self-pipe, is no sign of that)."""
    return bool(select.select([server], [], [], 0)[0])


# -- usage errors: one line, exit 2, the nearest names ----------------------------------------------------------


def test_usage_errors_are_one_line_with_the_nearest_names(tmp_path: Path, bodies: Path):
    """argparse's usage errors were five lines; a misspelt option got no "did you mean"."""
    proc = run("parse")
    assert proc.returncode == 2
    assert one_line(proc.stderr) == (
        "dspark-vllm parse: the following arguments are required: input, --output (see dspark-vllm parse --help)"
    )
    proc = run("parse", str(bodies), "--otput", "o.parquet")
    assert proc.returncode == 2
    assert "unrecognized arguments: --otput; did you mean --output?" in one_line(proc.stderr)
    proc = run("simulate", "--lateny-ms", "5")
    assert proc.returncode == 2
    assert one_line(proc.stderr).startswith(
        "dspark-vllm simulate: unrecognized arguments: --lateny-ms 5; did you mean --latency-ms"
    )
    proc = run("bench", "parse", "--bodys", "5")
    assert proc.returncode == 2 and "did you mean --bodies" in one_line(proc.stderr)
    proc = run("pars")
    assert proc.returncode == 2 and "invalid choice: 'pars'" in one_line(proc.stderr)
    # --verbose: the usage too
    proc = run("parse", "--verbose")
    assert proc.returncode == 2 and b"usage: dspark-vllm parse" in proc.stderr


def test_an_endpoint_that_is_no_url_is_a_usage_error():
    """`schema --endpoint localhost:18765` exited 1 (a failure while running); the README says usage errors exit 2."""
    proc = run("columns", "--endpoint", "localhost:18765")
    assert proc.returncode == 2
    assert one_line(proc.stderr) == (
        "dspark-vllm columns: the endpoint must be an http(s) URL such as 'http://127.0.0.1:8000', got "
        "'localhost:18765': it is not an http(s) URL."
    )


def test_the_gpu_fallback_is_one_short_line_and_a_fact_in_the_summary(tmp_path: Path, bodies: Path):
    """With 'auto' and no GPU: a long warning to install the GPU extra, repeated in the summary line."""
    from connector.errors import BackendUnavailable
    from connector.parse.backends import select_backend

    try:
        select_backend("gpu")
    except BackendUnavailable:
        pass
    else:
        pytest.skip("a GPU is usable here: 'auto' does not fall back")
    proc = run("parse", str(bodies), "--output", str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr
    warning, summary = proc.stderr.decode().splitlines()
    assert warning.startswith("WARNING parse backend 'auto' uses the CPU: ") and len(warning) < 100, warning
    assert summary.startswith("parsed 1, rejected 1, backend cpu (no GPU), "), summary


def test_a_usage_error_comes_before_the_gpu_fallback_warning(tmp_path: Path, bodies: Path):
    """`parse --output rows.csv` (backend 'auto', no GPU) printed the GPU-fallback warning, then its usage error:
    the arguments are checked before the backend is chosen, so the error is the one line."""
    from connector.errors import BackendUnavailable
    from connector.parse.backends import select_backend

    try:
        select_backend("gpu")
    except BackendUnavailable:
        pass
    else:
        pytest.skip("a GPU is usable here: 'auto' does not fall back")
    proc = run("parse", str(bodies), "--output", "rows.csv", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.decode().splitlines() == [
        "dspark-vllm parse: --output rows.csv: give a name ending in .parquet (or - for stdout)"
    ]


# -- sql: one line, no log left behind ----------------------------------------------------------------------------


def sql_logs(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("dspark-vllm-sql-*.log"))


@pytest.mark.flink
def test_sql_leaves_no_log_unless_it_names_it_and_says_one_line(tmp_path: Path):
    """`sql` left a ~120 KB log in the temp folder after every run, failed or not (its help says "named on
    failure"), pointed at an empty log on a syntax error, and a failure was four lines that suggested
    -Ddspark.verbose=true, which the command cannot pass. --verbose passes it: the stack trace comes too."""
    pytest.importorskip("pyflink")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**_env(), "TMPDIR": str(temp)}
    ok = tmp_path / "ok.sql"
    ok.write_text("SELECT 1 AS x;\n")
    proc = subprocess.run([*CLI, "sql", str(ok)], capture_output=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sql_logs(temp) == []
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT 1 AS x;\nSELEC 2;\n")
    proc = subprocess.run([*CLI, "sql", str(bad)], capture_output=True, timeout=300, env=env)
    assert proc.returncode == 1
    line = one_line(proc.stderr)
    assert line.startswith("dspark-vllm sql: statement 2 (SELEC 2) failed: "), line
    assert "dspark.verbose" not in line
    logs = sql_logs(temp)
    if "Flink's log: " in line:
        named = Path(line.rsplit("Flink's log: ", 1)[1])
        assert logs == [named.name] and named.stat().st_size > 0
    else:
        assert logs == []
    for log in temp.iterdir():
        log.unlink()
    proc = subprocess.run([*CLI, "sql", str(bad), "--verbose"], capture_output=True, timeout=300, env=env)
    assert proc.returncode == 1 and b"\tat org.apache.flink" in proc.stderr
    assert proc.stderr.decode().splitlines()[-1].startswith("dspark-vllm sql: statement 2 (SELEC 2) failed: ")


@pytest.mark.flink
@pytest.mark.slow
@pytest.mark.parametrize("signum,said", SIGNALS)
def test_sql_exits_as_the_readme_says_on_each_signal(tmp_path: Path, signum: int, said: str):
    """A signal to `dspark-vllm sql` reaches the JVM it runs; the command exits 128 + the signal with one line
    and leaves no temporary log."""
    pytest.importorskip("pyflink")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**_env(), "TMPDIR": str(temp)}
    running = tmp_path / "runs.sql"
    running.write_text(
        "CREATE TABLE g (x INT) WITH ('connector' = 'datagen', 'rows-per-second' = '10');\n"
        "CREATE TABLE b (x INT) WITH ('connector' = 'blackhole');\n"
        "INSERT INTO b SELECT x FROM g;\n"
    )
    proc = subprocess.Popen(
        preexec_fn=interruptible,
        args=[*CLI, "sql", str(running)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stderr is not None
        said_before = []
        while not said_before or b" submitted job " not in said_before[-1]:
            said_before.append(proc.stderr.readline())
            assert said_before[-1], said_before  # it runs: the job was submitted
        assert said_before[-1].startswith(b"dspark-vllm sql: statement 3 submitted job "), said_before
        stop_with(proc, signum, f"dspark-vllm sql: {said}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sql_logs(temp) == []
