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
