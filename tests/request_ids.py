"""The request ids the job gives the lines of a 'prompts.path' file, for the tests' and benchmarks' checks.

The job makes them on the JVM (io.dspark.vllm.sql.FileLines.requestId: the hex MD5 of
`<file>\\n<line number>\\n<line>`); this copy only tells which ids a run should have shown. Both are held to the
same vectors, tests/data/request_ids.json (FileLinesTest and tests/test_request_ids.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from pathlib import Path

VECTORS = json.loads((Path(__file__).parent / "data" / "request_ids.json").read_text(encoding="utf-8"))


def request_id_of(file: str | os.PathLike[str], line_number: int, line: str) -> str:
    """The request id of line `line_number` (from 1) of a 'prompts.path' file, the file a local one's absolute
    path (or `file:` URI) or another's URI. Two identical lines are two ids."""
    name = os.fspath(file)
    if name.startswith("file:") or "://" not in name:  # local: the absolute path, as Flink's Path makes it
        name = os.path.abspath(urllib.parse.urlsplit(name).path if name.startswith("file:") else name)
    return hashlib.md5(f"{name}\n{line_number}\n{line}".encode()).hexdigest()


def request_ids_of(path: str | os.PathLike[str]) -> list[str]:
    """The request ids of every line of a local 'prompts.path' file, in order (`request_id_of`)."""
    with open(path, "rb") as file:
        lines = file.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a file ending in a newline has no empty last line
    return [
        request_id_of(path, n, line.removesuffix(b"\r").decode("utf-8", "replace"))
        for n, line in enumerate(lines, start=1)
    ]
