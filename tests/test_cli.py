from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

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
    from connector.cli import main
    from connector.decode import readers
    from tests.libcudf_emulator import EmulatedLibcudfReader

    saved = dict(readers._chosen)
    readers._chosen["gpu"] = (EmulatedLibcudfReader(), None)
    try:
        args = ["bench", "parse", "--no-flink", "--bodies", "300", "--batch-size", "100", "--repeat", "1"]
        assert main([*args, "--gpu-batch-mb", "1", "--output-json", str(tmp_path / "bench.json")]) == 0
    finally:
        readers._chosen.clear()
        readers._chosen.update(saved)
    report = json.loads((tmp_path / "bench.json").read_text())
    paths = [r["path"] for r in report["results"]]
    assert paths[0] == "json.loads + pandas + fromtimestamp (today)"
    assert paths[2:] == [
        "dspark-vllm cpu (pyarrow), batch 100",
        "dspark-vllm gpu (pylibcudf), batch 100",
        "dspark-vllm gpu, one 1 MB batch",
        "dspark-vllm cpu, one 1 MB batch",
    ]
    by_path = {r["path"]: r for r in report["results"]}
    assert by_path["dspark-vllm cpu (pyarrow), batch 100"]["rows"] == 300
    assert by_path["dspark-vllm gpu, one 1 MB batch"]["rows"] == by_path["dspark-vllm gpu, one 1 MB batch"]["bodies"]
    assert "its reads alone" in by_path["dspark-vllm cpu, one 1 MB batch"]["note"]
    printed = capsys.readouterr().out
    assert "x today" in printed and "read " in printed and "content " in printed
