"""A prompt line's request id is the job's (io.dspark.vllm.sql.FileLines.requestId, on the JVM): the tests' copy
(tests/request_ids.py) gives the same ids for the shared vectors FileLinesTest runs, and the package makes none."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.request_ids import VECTORS, request_id_of, request_ids_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_shared_vectors():
    assert len(VECTORS["cases"]) >= 5
    for case in VECTORS["cases"]:
        assert request_id_of(case["path"], case["line_number"], case["line"]) == case["id"], case


def test_the_ids_of_a_files_lines(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(b"same\nsame\r\n\nlast")
    ids = request_ids_of(prompts)
    path = str(prompts)
    assert ids == [
        hashlib.md5(f"{path}\n1\nsame".encode()).hexdigest(),
        hashlib.md5(f"{path}\n2\nsame".encode()).hexdigest(),
        hashlib.md5(f"{path}\n3\n".encode()).hexdigest(),
        hashlib.md5(f"{path}\n4\nlast".encode()).hexdigest(),
    ]
    assert len(set(ids)) == 4  # two identical lines are two requests


def test_the_package_makes_no_request_id():
    """The rule is written once where it runs, in the job: no module of the package writes a copy."""
    for path in (ROOT / "connector").rglob("*.py"):
        assert "def request_id" not in path.read_text(), f"{path.relative_to(ROOT)} writes the request-id rule"
