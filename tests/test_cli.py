from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.bodies import chat, choice, encode


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "connector.cli", *args], input=stdin, capture_output=True, timeout=120)


def test_parse_file_to_parquet_and_errors(tmp_path: Path):
    lines = [
        encode(chat(id="a", choices=[choice('{"language": "go", "code": "x"}')])),
        b"garbage",
        encode({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}),
        encode(chat(id="b", choices=[choice("```rust\nfn main() {}\n```")])),
    ]
    source = tmp_path / "bodies.ndjson"
    source.write_bytes(b"\n".join(lines) + b"\n")
    out, errors = tmp_path / "out.parquet", tmp_path / "errors.ndjson"
    proc = run(
        "parse",
        str(source),
        "--profile",
        "coder",
        "--backend",
        "cpu",
        "--output",
        str(out),
        "--errors",
        str(errors),
    )
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out)
    assert table.column("line").to_pylist() == [1, 4]
    assert table.column("id").to_pylist() == ["a", "b"]
    assert table.column("language").to_pylist() == ["go", "rust"]
    assert str(table.schema.field("created").type) == "timestamp[ms, tz=UTC]"
    rejected = [json.loads(line) for line in errors.read_text().splitlines()]
    assert [(e["line"], e["reason"]) for e in rejected] == [
        (2, "not JSON: Expecting value at char 0"),
        (3, "error response (type=InternalServerError, code=500): boom"),
    ]
    assert rejected[0]["body"] == "garbage"
    summary = proc.stderr.decode().strip().splitlines()[-1]
    assert summary.startswith("parsed 2, rejected 2, backend cpu, ")


def test_parse_stdin(tmp_path: Path):
    out = tmp_path / "o.parquet"
    proc = run("parse", "-", "--backend", "cpu", "--output", str(out), stdin=encode(chat()) + b"\r\n")
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out).num_rows == 1


def test_parse_bad_arguments(tmp_path: Path):
    proc = run("parse", str(tmp_path / "missing.ndjson"), "--output", str(tmp_path / "o.parquet"))
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == f"dspark-vllm parse: {tmp_path / 'missing.ndjson'}: no such file"
    source = tmp_path / "in.ndjson"
    source.write_bytes(b"{}\n")
    proc = run("parse", str(source), "--profile", "nope", "--output", str(tmp_path / "o.parquet"))
    assert proc.returncode == 2
    assert "unknown profile 'nope'" in proc.stderr.decode()
    proc = run("parse", str(source), "--backend", "tpu", "--output", str(tmp_path / "o.parquet"))
    assert proc.returncode == 2 and b"invalid choice: 'tpu'" in proc.stderr


def test_bench_parse_prints_every_path_with_ratios(tmp_path: Path, capsys):
    """`dspark-vllm bench parse` (Flink baseline left out: it has its own job test), with the gpu rows that a
    GPU machine prints, made here with libcudf emulated."""
    from connector.bench import run_parse_benchmark
    from connector.cli.commands import _parser
    from connector.parse.backends import GpuBackend
    from tests.libcudf_emulator import EmulatedLibcudfReader

    args = ["bench", "parse", "--no-flink", "--bodies", "300", "--batch-size", "100", "--repeat", "1", "--min-cpu", "0"]
    parsed = _parser("bench").parse_args([*args, "--gpu-batch-mb", "1", "--output-json", str(tmp_path / "bench.json")])
    assert run_parse_benchmark(parsed, gpu=GpuBackend(EmulatedLibcudfReader())) == 0
    report = json.loads((tmp_path / "bench.json").read_text())
    paths = [r["path"] for r in report["results"]]
    assert paths[0] == "json.loads + pandas + fromtimestamp (today)"
    assert paths[2:] == [
        "dspark-vllm cpu (native core), batch 100",
        "dspark-vllm cpu, the orjson script's columns",
        "json.loads + pandas, all free-text content",
        "dspark-vllm cpu, all free-text content",
        "dspark-vllm gpu (pylibcudf), batch 100",
        "dspark-vllm gpu, one 1 MB batch",
        "dspark-vllm cpu, one 1 MB batch",
    ]
    by_path = {r["path"]: r for r in report["results"]}
    assert by_path["dspark-vllm cpu (native core), batch 100"]["rows"] == 300
    assert by_path["dspark-vllm gpu, one 1 MB batch"]["rows"] == by_path["dspark-vllm gpu, one 1 MB batch"]["bodies"]
    assert "its reads alone" in by_path["dspark-vllm cpu, one 1 MB batch"]["note"]
    captured = capsys.readouterr()
    printed = captured.out
    # Where the time went, in words: the gpu rows' stages by name, the cpu rows' one pass said as such (a row of
    # "screen 0% read 100% flatten 0% content 0% core 0%" told a reader nothing).
    notes = {r["path"]: r["note"] for r in report["results"]}
    assert "reading the bodies" in notes["dspark-vllm gpu (pylibcudf), batch 100"]
    assert notes["dspark-vllm cpu (native core), batch 100"] == (
        "all in the native core's one pass over each body (its content included)"
    )
    assert " 0%" not in printed.split("where each row's time went")[1]
    assert by_path["dspark-vllm cpu, the orjson script's columns"]["versus"] == "orjson + pyarrow.Table.from_pylist"
    # Each row names its baseline, and its ratio is to that one (a row's ratio was to the orjson script under a
    # column headed "x today"); no words of the tracker ("goals (issue N)", "goal 8x, not met").
    assert "x today" not in printed and "goal" not in printed and "issue" not in printed
    rows = {line.split("  ")[0]: line for line in printed.splitlines()}
    same = rows["dspark-vllm cpu, the orjson script's columns"]
    assert "orjson + pyarrow.Table.from_pylist" in same
    orjson_rate = 300 / by_path["orjson + pyarrow.Table.from_pylist"]["seconds"]
    ours_rate = 300 / by_path["dspark-vllm cpu, the orjson script's columns"]["seconds"]
    assert same.endswith(f"{ours_rate / orjson_rate:.1f}x")
    assert by_path["dspark-vllm cpu, the orjson script's columns"]["ratio"] == pytest.approx(ours_rate / orjson_rate)
    assert rows["json.loads + pandas, all free-text content"].rstrip().endswith("(a baseline)")
    assert "json.loads + pandas, all free-text content" in rows["dspark-vllm cpu, all free-text content"]
    # 300 bodies take milliseconds of CPU: said, once, on stderr.
    assert captured.err.count("WARNING: too short to trust: every row took under 0.5 s of CPU") == 1


def test_bench_parse_runs_each_row_long_enough_to_trust(tmp_path: Path, capsys):
    """The README's `dspark-vllm bench parse` ended with "WARNING: too short to trust" on 4 of its 6 rows: a row
    whose pass over the corpus is shorter than --min-cpu now makes several passes in each timed run."""
    from connector.bench import TOO_SHORT_S, run_parse_benchmark
    from connector.cli.commands import _parser

    args = ["bench", "parse", "--no-flink", "--bodies", "300", "--batch-size", "100", "--repeat", "1"]
    parsed = _parser("bench").parse_args([*args, "--min-cpu", "0.6", "--output-json", str(tmp_path / "bench.json")])
    assert run_parse_benchmark(parsed) == 0
    captured = capsys.readouterr()
    assert "WARNING" not in captured.err, captured.err
    for row in json.loads((tmp_path / "bench.json").read_text())["results"]:
        if row["seconds"] is not None:
            assert row["passes"] > 1 and row["seconds"] * row["passes"] >= TOO_SHORT_S, row


def test_bench_parse_a_run_the_calibration_misjudged_still_takes_min_cpu():
    """A path whose passes got faster after its calibration (a warm-up that lasts longer than one pass, or a machine
    that was busier then) made a timed run well under --min-cpu: "too short to trust" on a loaded machine. The run
    goes on until it took --min-cpu."""
    from connector.bench import TOO_SHORT_S, _Path, _time_round_robin

    made = 0

    def run() -> int:
        nonlocal made
        made += 1
        burn = 0.010 if made <= 40 else 0.002  # CPU seconds this pass costs: dearer while calibrating
        started = time.process_time()
        while time.process_time() - started < burn:
            pass
        return 1

    path = _Path("warms up slowly", run, bodies=1, size=1)
    _time_round_robin([path], repeat=1, min_cpu=0.6)
    assert path.seconds * path.passes >= 0.6 >= TOO_SHORT_S, (path.seconds, path.passes)


def test_bench_parse_cli_times_whole_processes(tmp_path: Path):
    """`--cli`: `dspark-vllm parse` and today's path as whole processes on the same file, each writing every row."""
    from connector.cli import main

    args = ["bench", "parse", "--no-flink", "--bodies", "200", "--batch-size", "100", "--repeat", "1", "--cli"]
    assert main([*args, "--output-json", str(tmp_path / "bench.json")]) == 0
    by_path = {r["path"]: r for r in json.loads((tmp_path / "bench.json").read_text())["results"]}
    today = by_path["json.loads + pandas + to_parquet, whole process"]
    ours = by_path["dspark-vllm parse --backend cpu, whole process"]
    assert (today["rows"], ours["rows"]) == (200, 200)
    assert ours["versus"] == "json.loads + pandas + to_parquet, whole process"
    assert ours["seconds"] > 0 and today["seconds"] > 0 and ours["wall_seconds"] > 0


def test_parse_imports_no_other_subcommand(tmp_path: Path):
    """`parse` does not import the simulator, the HTTP client or PyFlink just to build its argument parser, nor
    pandas (pyarrow imports it for pa.array; a tenth of a second, a third of the command's CPU, went to it), nor
    pyarrow.compute (25 ms). `import connector.cli` loads no numpy, so `parse` can keep OpenBLAS to one thread
    before numpy starts it (its spinning threads were a fifth of the command's CPU on 2 cores)."""
    (tmp_path / "in.ndjson").write_bytes(encode(chat()) + b"\n")
    code = (
        "import os, sys\nfrom connector.cli import main\n"
        "early = sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules)\n"
        f"main(['parse', {str(tmp_path / 'in.ndjson')!r}, '--profile', 'coder', '--backend', 'cpu',"
        f" '--output', {str(tmp_path / 'o.parquet')!r}])\n"
        "print(early, sorted(m for m in ('aiohttp', 'pyflink', 'connector.simulator', 'connector.flink', 'pandas',"
        " 'pyarrow.compute') if m in sys.modules), os.environ.get('OPENBLAS_NUM_THREADS'))"
    )
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root, env=env)
    assert done.stdout.strip() == "[] [] 1"


# -- hostile use: one-line errors before any work, one exit scheme, nothing lost -----------------


def one_line_error(proc: subprocess.CompletedProcess[bytes], code: int, message: str) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("dspark-vllm "), err
    assert message in err, err


@pytest.fixture
def bodies_file(tmp_path: Path) -> Path:
    source = tmp_path / "in.ndjson"
    source.write_bytes(encode(chat(id="a")) + b"\n" + b"garbage\n")
    return source


@pytest.mark.parametrize(
    "where,message",
    [
        ("missing/o.parquet", "cannot write there: No such file or directory"),
        ("dir", "is a directory; give a file name"),
        ("file/o.parquet", "Not a directory"),
        ("/proc/o.parquet", "cannot write there"),
        ("newdir/", "is a folder name; give a file name"),  # (all the work was done, then exit 1)
        ("file/", "is a folder name; give a file name"),
    ],
)
@pytest.mark.parametrize("flag", ["--output", "--errors"])
def test_bad_output_paths_are_one_line_before_parsing(
    tmp_path: Path, bodies_file: Path, where: str, message: str, flag: str
):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    bad = where if where.startswith("/") else str(tmp_path / where) + ("/" if where.endswith("/") else "")
    paths = {"--output": str(tmp_path / "o.parquet"), "--errors": str(tmp_path / "e.ndjson"), flag: bad}
    proc = run(
        "parse", str(bodies_file), "--backend", "cpu", "--output", paths["--output"], "--errors", paths["--errors"]
    )
    one_line_error(proc, 2, f"dspark-vllm parse: {flag} {bad}: ")
    assert message in proc.stderr.decode()
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "e.ndjson").exists()


@pytest.mark.parametrize("errors", ["e.ndjson", "e.parquet"])
@pytest.mark.parametrize("lines", [1, 5000])
def test_a_full_disk_is_one_line_and_leaves_no_output(tmp_path: Path, bodies_file: Path, lines: int, errors: str):
    """/dev/full as either file; with 5000 bad lines the writes fail while the writers are open (a traceback
    of the Parquet writer, collected at exit, followed the line)."""
    bodies_file.write_bytes(bodies_file.read_bytes() + b"x\n" * lines)
    for output, rejected in (("/dev/full", str(tmp_path / errors)), (str(tmp_path / "o.parquet"), "/dev/full")):
        proc = run("parse", str(bodies_file), "--backend", "cpu", "--output", output, "--errors", rejected)
        one_line_error(proc, 1, "No space left on device")
        assert list(tmp_path.iterdir()) == [bodies_file]


def test_empty_paths_and_a_closed_stdin_are_one_line(tmp_path: Path, bodies_file: Path):
    out = str(tmp_path / "o.parquet")
    cpu = ("--backend", "cpu")
    one_line_error(run("parse", str(bodies_file), *cpu, "--output", ""), 2, "--output: give a file name")
    proc = run("parse", str(bodies_file), *cpu, "--output", out, "--errors", "")
    one_line_error(proc, 2, "--errors: give a file name")
    proc = subprocess.run(
        [sys.executable, "-m", "connector.cli", "parse", "-", *cpu, "--output", out], stdin=None, capture_output=True,
        timeout=60, preexec_fn=lambda: os.close(0),
    )  # fmt: skip
    one_line_error(proc, 2, "-: there is no standard input (it is closed): give a file")
    assert list(tmp_path.iterdir()) == [bodies_file]


def test_outputs_through_links(tmp_path: Path, bodies_file: Path):
    """A link to a file stays a link (the file is written); a link into /proc (here to this process's
    stdout, as /dev/stdout is) is written through, never replaced: it was replaced by a new file, the system's
    /dev/stdout too, and the file the shell had opened stayed empty. Two paths that are the same file through
    a linked folder are refused."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "real.parquet").write_bytes(b"old")
    (tmp_path / "link.parquet").symlink_to(tmp_path / "data" / "real.parquet")
    (tmp_path / "mystdout").symlink_to("/proc/self/fd/1")
    captured = tmp_path / "captured.ndjson"
    with captured.open("wb") as stdout:
        proc = subprocess.run(
            [sys.executable, "-m", "connector.cli", "parse", str(bodies_file), "--backend", "cpu", "--output",
             str(tmp_path / "link.parquet"), "--errors", str(tmp_path / "mystdout")],
            stdout=stdout, stderr=subprocess.PIPE, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "link.parquet").is_symlink() and (tmp_path / "mystdout").is_symlink()
    assert pq.read_table(tmp_path / "data" / "real.parquet").column("id").to_pylist() == ["a"]
    assert [json.loads(line)["body"] for line in captured.read_text().splitlines()] == ["garbage"]
    (tmp_path / "linkdir").symlink_to(tmp_path / "data")
    proc = run(
        "parse", str(bodies_file), "--output", str(tmp_path / "data" / "x.out"),
        "--errors", str(tmp_path / "linkdir" / "x.out"),
    )  # fmt: skip
    one_line_error(proc, 2, "is the --output file: give another path")


def test_outputs_get_the_mode_of_a_new_file_or_keep_theirs(tmp_path: Path, bodies_file: Path):
    """mkstemp's 0600 was every output's mode, also of an output that was 0664 before."""
    out = tmp_path / "o.parquet"
    previous = os.umask(0o022)
    try:
        assert run("parse", str(bodies_file), "--backend", "cpu", "--output", str(out)).returncode == 0
        assert out.stat().st_mode & 0o777 == 0o644
        out.chmod(0o664)
        assert run("parse", str(bodies_file), "--backend", "cpu", "--output", str(out)).returncode == 0
        assert out.stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(previous)


@pytest.mark.parametrize("size", ["0", "-3", "x"])
def test_batch_size_must_be_positive(tmp_path: Path, bodies_file: Path, size: str):
    proc = run("parse", str(bodies_file), "--output", str(tmp_path / "o.parquet"), "--batch-size", size)
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr
    assert b"argument --batch-size: expected a positive integer" in proc.stderr


def test_output_or_errors_equal_to_the_input_is_refused(tmp_path: Path, bodies_file: Path):
    before = bodies_file.read_bytes()
    proc = run("parse", str(bodies_file), "--output", str(bodies_file))
    one_line_error(proc, 2, f"--output {bodies_file} is the input file: give another path")
    proc = run("parse", str(bodies_file), "--output", str(tmp_path / "o.parquet"), "--errors", str(bodies_file))
    one_line_error(proc, 2, f"--errors {bodies_file} is the input file: give another path")
    assert bodies_file.read_bytes() == before


def test_input_that_is_a_directory_or_a_device(tmp_path: Path):
    proc = run("parse", str(tmp_path), "--output", str(tmp_path / "o.parquet"))
    one_line_error(
        proc, 2, f"dspark-vllm parse: {tmp_path}: is a directory; give a file with one response body per line"
    )
    proc = run(
        "parse", "/dev/stdin", "--backend", "cpu", "--output", str(tmp_path / "o.parquet"), stdin=encode(chat()) + b"\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 1


@pytest.mark.parametrize(
    "text,message",
    [
        ("name: [unclosed", "not valid YAML at line 1, column 16: expected ',' or ']', but got '<stream end>'"),
        ("name: b\ncolumns: [x]\nbody: {type: object}\n", "key 'columns.0': 'x' is not of type 'object'"),
        ("name: b\ncolumns: [{name: x}]\nbody: {type: object}\n", "key 'columns.0': 'path' is a required property"),
        ("name: b\ncolumns: [{name: x, path: 5}]\nbody: {type: object}\n", "key 'columns.0.path': 5 is not valid"),
        ("name: b\ncolumns: [{name: x, path: x}]\nbody: {type: object, properties: [x]}\n", "key 'body.properties'"),
        (
            "name: b\ncolumns: [{name: x, path: x}, {name: x, path: x}]\nbody: {type: object, properties: {x: {type: string}}}\n",
            "key 'columns.1.name': 'x' is already a column",
        ),
    ],
)
def test_a_bad_profile_is_one_line(tmp_path: Path, bodies_file: Path, text: str, message: str):
    profile = tmp_path / "bad.yaml"
    profile.write_text(text)
    proc = run("parse", str(bodies_file), "--profile", str(profile), "--output", str(tmp_path / "o.parquet"))
    one_line_error(proc, 2, f"dspark-vllm parse: {profile}: ")
    assert message in proc.stderr.decode()


def test_gpu_message_names_the_flag(tmp_path: Path, bodies_file: Path):
    from connector.errors import BackendUnavailable
    from connector.parse.backends import select_backend

    try:
        select_backend("gpu")
    except BackendUnavailable:
        pass
    else:
        pytest.skip("a GPU is usable here")
    proc = run("parse", str(bodies_file), "--backend", "gpu", "--output", str(tmp_path / "o.parquet"))
    one_line_error(proc, 2, "--backend cpu on the command line")


def test_verbose_after_the_subcommand(tmp_path: Path, bodies_file: Path):
    proc = run("parse", str(bodies_file), "-v", "--backend", "cpu", "--output", str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr
    proc = run("-v", "parse", str(bodies_file), "--backend", "cpu", "--output", str(tmp_path / "o.parquet"))
    assert proc.returncode == 0, proc.stderr


def test_errors_file_keeps_every_body_exactly(tmp_path: Path):
    bad = [b"caf\xe9 not utf-8", b'{"id": "\xff"}', "é garbage".encode(), b"", b"\x00\x01{"]
    source = tmp_path / "in.ndjson"
    source.write_bytes(b"\n".join([encode(chat(id="a")), *bad]) + b"\n")
    for name in ("e.ndjson", "e.parquet"):
        errors = tmp_path / name
        proc = run(
            "parse", str(source), "--backend", "cpu", "--output", str(tmp_path / "o.parquet"), "--errors", str(errors)
        )
        assert proc.returncode == 0, proc.stderr
        if name.endswith(".parquet"):
            kept = pq.read_table(errors).column("body").to_pylist()
        else:
            rows = [json.loads(line) for line in errors.read_text().splitlines()]
            kept = [r["body"].encode() if "body" in r else base64.b64decode(r["body_base64"]) for r in rows]
        assert kept == bad


def test_parse_streams_in_batches_with_the_same_output(tmp_path: Path):
    lines = [encode(chat(id=f"c{i}")) if i % 9 else b"bad" for i in range(250)]
    source = tmp_path / "in.ndjson"
    source.write_bytes(b"\r\n".join(lines))  # CRLF, no newline at the end
    tables = []
    for size in ("7", "10000"):
        out, errors = tmp_path / f"o{size}.parquet", tmp_path / f"e{size}.ndjson"
        proc = run(
            "parse",
            str(source),
            "--backend",
            "cpu",
            "--batch-size",
            size,
            "--output",
            str(out),
            "--errors",
            str(errors),
        )
        assert proc.returncode == 0, proc.stderr
        tables.append((pq.read_table(out), errors.read_text()))
    assert tables[0][0].equals(tables[1][0]) and tables[0][1] == tables[1][1]
    assert tables[0][0].column("line").to_pylist() == [i + 1 for i in range(250) if i % 9]
    assert [json.loads(e)["line"] for e in tables[0][1].splitlines()] == [i + 1 for i in range(250) if not i % 9]


def test_a_body_that_crashed_the_batch_is_one_error_row(tmp_path: Path):
    source = tmp_path / "in.ndjson"
    source.write_bytes(encode(chat(id="a")) + b'\n{"error":{"message":"bad \\ud800 escape","code":500}}\n')
    errors = tmp_path / "e.ndjson"
    proc = run(
        "parse", str(source), "--backend", "cpu", "--output", str(tmp_path / "o.parquet"), "--errors", str(errors)
    )
    assert proc.returncode == 0, proc.stderr
    (error,) = [json.loads(line) for line in errors.read_text().splitlines()]
    assert (error["line"], error["reason"], error["field"]) == (
        2,
        "invalid string: unpaired surrogate escape",
        "error.message",
    )


def test_lines_are_cut_as_they_lie_whatever_the_blocks(monkeypatch):
    """`line_batches` against the plain definition (split at \\n, drop one \\r before it, a line over the limit cut to
    the limit + 2 so that it stays over it after that), on seeded random bytes with tiny blocks, limits and
    batches: lines across blocks, \\r at a block's end, empty lines, no final newline."""
    import io
    import random

    import connector.strict as strict
    from connector.cli import parse as cli

    def expected(data: bytes, keep: int) -> list[bytes]:
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        return [line[:keep][:-1] if line[:keep].endswith(b"\r") else line[:keep] for line in lines]

    rng = random.Random("cli lines")
    for _ in range(3000):
        monkeypatch.setattr(cli, "_READ_SIZE", rng.choice([1, 2, 3, 5, 8, 64]))
        monkeypatch.setattr(cli, "_BATCH_BYTES", rng.choice([1, 5, 1000]))
        monkeypatch.setattr(strict, "MAX_BODY_BYTES", rng.choice([1, 2, 4, 10, 100]))
        data = bytes(rng.choice(b"ab\r\n") for _ in range(rng.randrange(0, 80)))
        size = rng.choice([1, 2, 3, 1000])
        batches = list(cli.line_batches(io.BytesIO(data), size))
        assert all(0 < len(b) <= size for b in batches)
        lines = [line for b in batches for line in b]
        assert lines == expected(data, strict.MAX_BODY_BYTES + 2), data
        for line, given in zip(lines, data.split(b"\n"), strict=False):
            whole = given[:-1] if given.endswith(b"\r") else given
            assert line == whole if len(whole) <= strict.MAX_BODY_BYTES else len(line) > strict.MAX_BODY_BYTES


def test_an_endless_line_is_one_error_row_in_bounded_memory(tmp_path: Path):
    """A 600 MB line (docs/json.md: a body over 256 MiB is not read) is one error row without its body, the lines
    around it rows; the command holds at most the limit of it (it held the whole line, then read it)."""
    source = tmp_path / "in.ndjson"
    with source.open("wb") as f:
        f.write(encode(chat(id="a")) + b'\n{"id": "')
        for _ in range(600):
            f.write(b"x" * (1 << 20))
        f.write(b'"}\n' + encode(chat(id="b")) + b"\n")
    out, errors = tmp_path / "o.parquet", tmp_path / "e.ndjson"
    measured = (
        "import atexit, resource, runpy, sys\n"
        "atexit.register(lambda: print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))\n"
        "sys.argv[0] = 'dspark-vllm'\n"
        "runpy.run_module('connector.cli', run_name='__main__')\n"
    )
    args = ["parse", str(source), "--backend", "cpu", "--output", str(out), "--errors", str(errors)]
    proc = subprocess.run([sys.executable, "-c", measured, *args], capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert pq.read_table(out).column("id").to_pylist() == ["a", "b"]
    (error,) = [json.loads(line) for line in errors.read_text().splitlines()]
    assert (error["line"], error["reason"], error["body"]) == (2, "body too large: over 268435456 bytes", None)
    maxrss_kib = int(proc.stderr.decode().split("maxrss ")[-1].split()[0])
    assert maxrss_kib < 1_400_000, f"{maxrss_kib} KiB"


def test_row_groups_do_not_follow_the_batches(tmp_path: Path):
    """A row group a batch grew the Parquet footer, held in memory to the end: 20k bodies parsed one at a time
    held 1.4 GB. Rows (and Parquet error rows) are written in groups of at least 2^17 rows or 64 MiB."""
    source = tmp_path / "in.ndjson"
    source.write_bytes(b"".join(encode(chat(id=f"c{i}")) + b"\n" + b"bad\n" for i in range(300)))
    out, errors = tmp_path / "o.parquet", tmp_path / "e.parquet"
    proc = run(
        "parse", str(source), "--backend", "cpu", "--batch-size", "1", "--output", str(out), "--errors", str(errors)
    )
    assert proc.returncode == 0, proc.stderr
    for path in (out, errors):
        assert pq.ParquetFile(path).num_row_groups == 1 and pq.ParquetFile(path).metadata.num_rows == 300


def test_sigterm_removes_the_temporary_files(tmp_path: Path):
    """Killed with SIGTERM (or SIGHUP) while it reads, the command says so in one line, exits 128 + the signal
    and leaves no temporary file: the .partial files stayed."""
    import signal
    import time

    for signum in (signal.SIGTERM, signal.SIGHUP):
        proc = subprocess.Popen(
            [sys.executable, "-m", "connector.cli", "parse", "-", "--backend", "cpu", "--output",
             str(tmp_path / "o.parquet"), "--errors", str(tmp_path / "e.ndjson")],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(encode(chat()) + b"\n" * 3)
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob(".*.partial"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(list(tmp_path.glob(".*.partial"))) == 2  # it is reading stdin, which stays open
        proc.send_signal(signum)
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 128 + signum, err
        assert err == f"dspark-vllm parse: terminated ({signal.Signals(signum).name})\n"
        assert list(tmp_path.iterdir()) == []
        proc.stdin.close()


def test_the_per_body_benchmark_runs():
    """benchmarks/cli_per_body.py (docs/benchmarks.md quotes it), on tiny files: two sizes and the ratio per body."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "cli_per_body.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--small", "20", "--large", "60", "--repeat", "1"],
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == 3 and lines[0].endswith("x") and lines[1].endswith("x"), lines
    assert lines[2].startswith("each body past the first 20: ")  # its ratio too small to measure, or one


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("http://user:sk-cli-secret-9@127.0.0.1:9", "holds a user name or password"),
        # a password with '/' in it ends the URL's authority before its '@'
        ("http://user:sk-cli-secret-9/x@127.0.0.1:9", "holds a user name or password"),
        ("http://127.0.0.1:9/v1?key=sk-cli-secret-9", "takes no query ('?') or fragment ('#')"),
    ],
)
def test_an_endpoint_with_a_password_is_refused_without_repeating_it(endpoint, message):
    """`dspark-vllm columns --endpoint http://user:KEY@host` said "cannot connect to http://user:KEY@host"."""
    proc = run("columns", "--endpoint", endpoint, "--profile", "coder")
    err = proc.stderr.decode()
    assert proc.returncode != 0 and "sk-cli-secret-9" not in err + proc.stdout.decode(), err
    assert message in err and len(err.strip().splitlines()) == 1, err


# -- help: what a reader sees first -------------------------------------------------------------------------------


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser, by its words ("bench parse", "simulate", ...), its options added."""
    from connector.cli.commands import _DELEGATED, _parser

    found = {}
    for command in ["parse", "bench", *_DELEGATED]:
        parser = _parser(command)
        sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        if command == "bench":
            found["bench parse"] = sub._subparsers._group_actions[0].choices["parse"]  # type: ignore[union-attr]
        else:
            found[command] = sub
    return found


def test_version():
    """There was no --version."""
    from importlib.metadata import version

    proc = run("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == f"dspark-vllm {version('dspark-vllm')}"


def test_the_top_level_help_says_what_the_command_does():
    """It read "thin argument parsing over the library": how the module is written, not what the command does."""
    proc = run("--help")
    assert proc.returncode == 0
    text = proc.stdout.decode()
    assert "thin" not in text and "library" not in text, text[:400]
    assert "simulator" in text and "Parquet" in text and "Flink SQL" in text, text[:400]


def test_every_option_has_help_that_says_its_default():
    """`simulate --port` hid its default (8000), `--max-model-len` had no help; `bench parse` had none for
    `--profile`, `--seed`, `--batch-size`'s default, and hid `--json-share`'s default."""
    import argparse

    missing = []
    for words, parser in _subparsers().items():
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction) or action.dest == "verbose":
                continue
            flag = max(action.option_strings, key=len)
            if not action.help:
                missing.append(f"{words} {flag}: no help")
                continue
            default = action.default
            if default in (None, False, [], argparse.SUPPRESS) or action.required:
                continue
            shown = {str(default), f"{default:,}" if isinstance(default, int) else str(default)}
            if isinstance(default, float) and default == int(default):
                shown.add(str(int(default)))
            if isinstance(default, float) and default < 1:
                shown.add(f"{default:.0%}")
            text = action.help.lower()
            if "default" not in text or not any(s.lower() in text for s in shown):
                missing.append(f"{words} {flag}: default {default!r} not in {action.help!r}")
    assert not missing, "\n".join(missing)


def test_help_names_no_time_of_writing():
    """`bench parse --cli` said "against today's": a reader's today is another day."""
    for words, parser in _subparsers().items():
        assert "today" not in parser.format_help(), words
