"""The features job's output folder read back: the feature rows (OUTPUT/features), the users' rows
(OUTPUT/users), the number of error rows (OUTPUT/errors) and the run's details (OUTPUT/run.json)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

__all__ = ["RUN_FILE", "json_lines", "mark_partial", "parse_time", "read_results", "read_run", "read_users"]


def _part_files(path: Path) -> list[Path]:
    """The committed part files under `path` (in-progress files are hidden: '.part-...')."""
    return [f for f in sorted(path.rglob("*")) if f.is_file() and not f.name.startswith(".")]


def json_lines(folder: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for file in _part_files(folder):
        with open(file, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def read_users(output: Path) -> list[dict[str, object]]:
    """The per-user rows under OUTPUT/users (one per window and user; none for a replay)."""
    return json_lines(output / "users")


def read_results(output: Path) -> tuple[list[dict[str, object]], int]:
    """The feature rows under OUTPUT/features (one per window and model), and how many error rows there are
    under OUTPUT/errors (counted line by line: there may be many, and only their number is shown)."""
    rows = json_lines(output / "features")
    errors = 0
    for file in _part_files(output / "errors"):
        with open(file, "rb") as f:
            errors += sum(1 for line in f if line.strip())
    mark_partial(rows)
    return rows, errors


RUN_FILE = "run.json"  # the run's details, beside features/ and errors/


def parse_time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def mark_partial(rows: list[dict[str, object]]) -> None:
    """Sets `partial` on the windows the run covered only in part: the one it started in and the one it ended in,
    unless the run's first or last event lies within a twentieth of the window (at least 1 s) of the edge. The
    second of two 1-minute windows of a 60 s run held 134 requests against 2,866 and looked like a drop."""
    firsts = [t for r in rows if (t := parse_time(r.get("first_event"))) is not None]
    lasts = [t for r in rows if (t := parse_time(r.get("last_event"))) is not None]
    if not firsts or not lasts:  # results of a job that did not record them
        return
    run_first, run_last = min(firsts), max(lasts)
    for r in rows:
        start, end = parse_time(r.get("window_start")), parse_time(r.get("window_end"))
        if start is None or end is None:
            continue
        slack = max(1.0, (end - start).total_seconds() / 20)
        r["partial"] = (run_first - start).total_seconds() > slack or (end - run_last).total_seconds() > slack


def read_run(output: Path) -> dict[str, object]:
    try:
        return dict(json.loads((output / RUN_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}
