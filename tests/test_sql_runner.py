"""The SQL runner (`io.dspark.vllm.sql.SqlRunner`) on scripts a user writes: identifiers that end in CASE or
END, table hints, comments between tokens, a job that fails at run time, a file that is not UTF-8, Flink's
multi-line messages. Plain JVM runs with Flink's own connectors (datagen, blackhole): no Python planner."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pyflink")

from connector.flink.sql_cli import java_command  # noqa: E402

pytestmark = [pytest.mark.flink]


def run_sql(tmp_path: Path, script: str | bytes) -> subprocess.CompletedProcess:
    path = tmp_path / "job.sql"
    if isinstance(script, bytes):
        path.write_bytes(script)
    else:
        path.write_text(script, encoding="utf-8")
    command = java_command(str(path), [], str(tmp_path / "flink.log"))
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def failed_line(run: subprocess.CompletedProcess) -> str:
    lines = [line for line in run.stderr.splitlines() if line.startswith("SqlRunner: statement ")]
    return next(line for line in lines if " failed: " in line)


def test_identifiers_ending_in_case_or_end_do_not_join_statements(tmp_path):
    run = run_sql(tmp_path, "SELECT 1 AS use_case;\nSELECT 2 AS end_time, 3 AS case$1;\nSELECT 4 AS x;\n")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "use_case" in run.stdout and "end_time" in run.stdout and "| x |" in run.stdout.replace("  ", "")


def test_a_comment_between_tokens_separates_them(tmp_path):
    run = run_sql(tmp_path, "SELECT/* one */1 AS x;\n")
    assert run.returncode == 0, run.stderr[-2000:]


def test_table_hints_reach_flink(tmp_path):
    script = (
        "CREATE TABLE g (x INT) WITH ('connector' = 'datagen', 'number-of-rows' = '1');\n"
        "SELECT * FROM g /*+ OPTIONS('no-such-option' = '1') */;\n"
    )
    run = run_sql(tmp_path, script)
    assert run.returncode == 1, "the hint was dropped: " + run.stdout[-500:]
    assert "statement 2 (SELECT * FROM g /*+ OPTIONS(" in failed_line(run) and "no-such-option" in failed_line(run)


def test_a_job_that_fails_names_the_statement_that_submitted_it(tmp_path):
    script = (
        "CREATE TABLE g (s STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '3', 'fields.s.length' = '5');\n"
        "CREATE TABLE b (x INT) WITH ('connector' = 'blackhole');\n"
        "INSERT INTO b SELECT CAST(s AS INT) FROM g;\n"
        "CREATE TABLE c (x INT) WITH ('connector' = 'blackhole');\n"
    )
    run = run_sql(tmp_path, script)
    assert run.returncode == 1
    # The statement's beginning is on the line (it was a second line).
    assert failed_line(run).startswith("SqlRunner: statement 3 (INSERT INTO b SELECT CAST(s AS INT) FROM g) failed: ")


def test_flinks_multi_line_messages_are_one_line(tmp_path):
    script = "CREATE TABLE g (x INT) WITH ('connector' = 'datagen', 'bogus' = '1');\nSELECT * FROM g;\n"
    run = run_sql(tmp_path, script)
    assert run.returncode == 1
    line = failed_line(run)
    assert "Unsupported options found for 'datagen'" in line and "bogus" in line
    # The one line ends what it says: no hint of a -D option the command line cannot pass, no statement line.
    assert run.stderr.splitlines()[-1] == line and "dspark.verbose" not in run.stderr


def test_a_file_that_is_not_utf8_says_so(tmp_path):
    run = run_sql(tmp_path, b"SELECT 'caf\xe9' AS x;\n")
    assert run.returncode == 2
    assert run.stderr.strip().endswith("job.sql: it is not UTF-8 text"), run.stderr


def test_values_are_printed_whole_and_the_rows_counted(tmp_path):
    """Every printed column was cut at 30 characters (an error row read `request failed: connect: th...`) and
    'sql-client.display.max-column-width' was ignored. Values are printed whole; the setting, where it is given,
    cuts them; a closing line counts the rows and the error rows (a column named error, error_reason or
    `error.reason` that is not NULL)."""
    long = "request failed: connect: the host vllm does not resolve (DNS)"
    script = (
        f"SELECT * FROM (VALUES ('a', CAST(NULL AS STRING)), ('b', '{long}'), ('c', CAST(NULL AS STRING))) "
        "AS t(k, error);\n"
        "SELECT 'x' AS k;\n"
        "SET 'sql-client.display.max-column-width' = '12';\n"
        f"SELECT '{long}' AS reason;\n"
    )
    run = run_sql(tmp_path, script)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"| {long} |" in run.stdout, run.stdout
    lines = run.stdout.splitlines()
    counts = [line for line in lines if line.endswith(("row", "rows")) or "error row" in line]
    assert counts == ["3 rows, 1 error row (error set)", "1 row", "1 row"], run.stdout
    assert "| request f... |" in run.stdout, run.stdout
