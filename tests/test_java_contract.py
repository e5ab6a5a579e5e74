"""The planner's contract from both sides: plans made by the Python planner (`connector.plan`), read by
the jar's own classes (`TablePlan`, `RequestSpec`, `RequestStep`, the factory's declared options) in a JVM
(java/src/test/java/.../ContractCheck.java), which prints what it understood; and plans of another version, or
other request columns, refused on the Java side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connector.options import OPTIONS, RETIRED
from connector.plan.contract import PLAN_VERSION, REQUEST_COLUMNS
from connector.plan.table import table_plan as plan
from tests.java import NEEDS_JDK, build_jar

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    NEEDS_JDK,
]


def declared(options: dict[str, str]) -> dict:
    column = {"name": "id", "kind": "physical", "type": {"sql": "VARCHAR(2147483647)", "root": "VARCHAR"}}
    return {"name": "responses", "options": options, "columns": [column], "watermark": None}


REQUEST = {
    "connector": "dspark-vllm",
    "endpoint": "https://vllm.example:8443/v1",
    "model": "m",
    "prompts.rate": "5",
    "api-key": "k-secret-7",
    "request.concurrency": "auto",
    "request.concurrency.max": "40",
    "request.temperature": "0.25",
    "request.retry.max-attempts": "3",
    "request.rate-limit": "12.5",
    "request.timeout": "45 s",
}
REPLAY = {"connector": "dspark-vllm", "mode": "replay", "replay.path": "/data/bodies"}


def read_in_java(tmp_path: Path, plans: dict[str, dict]) -> dict[str, dict]:
    paths = []
    for name, made in plans.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(made))
        paths.append(str(path))
    result = build_jar().java_tests(*paths, main="io.dspark.vllm.sql.ContractCheck")
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return dict(zip(plans, map(json.loads, result.stdout.strip().splitlines()), strict=True))


def test_the_jar_reads_the_plans_the_planner_makes(tmp_path):
    made = {"request": plan(declared(REQUEST)), "replay": plan(declared(REPLAY))}
    read = read_in_java(tmp_path, made)
    request, replay = read["request"], read["replay"]

    assert (request["mode"], request["bounded"], replay["mode"], replay["bounded"]) == (
        "request",
        False,
        "replay",
        True,
    )
    assert (
        request["parse_internal"]
        == made["request"]["parse_internal"]
        == ["_line", "_error", "_error_field", "_backend"]
    )
    assert request["flat"] == {c["name"]: c["type"] for c in made["request"]["flat"]}
    # The factory declares to Flink the keys of the one option table.
    assert request["option_keys"] == [o.key for o in OPTIONS if not o.required]
    assert request["retired"] == RETIRED

    spec = request["spec"]
    assert spec["url"] == "https://vllm.example:8443/v1/chat/completions"
    assert spec["health_url"] == "https://vllm.example:8443/health"
    assert json.loads(spec["body"]) == {
        "messages": [{"role": "user", "content": "PROMPT"}],
        "model": "m",
        "temperature": 0.25,
    }
    assert (spec["timeout_s"], spec["deadline_s"], spec["max_attempts"], spec["rate_limit"]) == (45.0, 300.0, 3, 12.5)
    assert (spec["adaptive"], spec["concurrency"], spec["min"], spec["max"]) == (True, 16, 1, 40)
    assert (spec["max_body_bytes"], spec["tls_verify"]) == (32 * 1024**2, True)
    assert spec["headers"]["authorization"] == "Bearer k-secret-7"
    assert "k-secret-7" not in spec["to_string"]  # what a log line of the spec would show
    assert request["request_step"] == "accepted"
    assert [c[0] for c in made["request"]["request"]["columns"]] == [n for n, _ in REQUEST_COLUMNS]


def test_plans_of_another_version_are_refused_with_what_to_do(tmp_path):
    read = read_in_java(tmp_path, {"request": plan(declared(REQUEST))})["request"]
    made, known = PLAN_VERSION + 1, PLAN_VERSION
    assert f"the table's plan is of version {made}, this jar reads version {known}" in read["plan_of_another_version"]
    assert "install the same dspark-vllm on the client and the TaskManagers" in read["spec_of_another_version"]
    assert "are not this jar's" in read["wrong_columns"]


def test_the_generated_reader_refuses_a_key_it_does_not_know_or_lacks_in_one_line(tmp_path):
    """connector/plan/records.py's reader (PlanReader.java): every key of the plan is declared there; an
    unknown key, a missing one, a value of another type, a layout of two kinds is refused, naming where."""
    read = read_in_java(tmp_path, {"replay": plan(declared(REPLAY))})["replay"]
    messages = {k: read[k] for k in ("unknown_key", "missing_key", "wrong_type", "two_layouts")}
    assert messages == {
        "unknown_key": "dspark-vllm: the table's plan.native.batch_sise is no key of this jar's plan: install the "
        "same dspark-vllm on the client and the TaskManagers",
        "missing_key": "dspark-vllm: the table's plan.settings is missing: install the same dspark-vllm on the "
        "client and the TaskManagers",
        "wrong_type": "dspark-vllm: the table's plan.bounded is not true or false: install the same dspark-vllm "
        "on the client and the TaskManagers",
        "two_layouts": "dspark-vllm: the table's plan.metadata[0].from has not exactly one of column, row, answer: "
        "install the same dspark-vllm on the client and the TaskManagers",
    }
