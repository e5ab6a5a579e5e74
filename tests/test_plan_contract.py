"""The planner's contract declared once (connector/plan/contract.py, server/outcome.py, flink/metrics.py) and
generated for the jar (`io.dspark.vllm.plan.PlanContract`): the file is fresh, and no Java or Python code
writes a metric name or an error kind by hand beside it."""

from __future__ import annotations

import re
from pathlib import Path

from connector.flink.metrics import PARSE_METRICS, REQUEST_METRICS
from connector.plan import contract
from connector.server.outcome import ERROR_KINDS

ROOT = Path(__file__).resolve().parents[1]
JAVA = ROOT / "java" / "src" / "main" / "java"
GENERATED = JAVA / "io" / "dspark" / "vllm" / "plan" / "PlanContract.java"


def test_the_generated_java_contract_is_fresh() -> None:
    assert GENERATED.read_text() == contract.contract_java(), (
        f"stale: run python -m connector.plan.contract --java {GENERATED.relative_to(ROOT)}"
    )


def test_the_check_command_says_stale_in_one_line(tmp_path: Path) -> None:
    stale = tmp_path / "PlanContract.java"
    stale.write_text(GENERATED.read_text().replace('"numRequests"', '"numRequestz"'))
    assert contract._main(["--check", str(stale)]) == 1
    assert contract._main(["--check", str(GENERATED)]) == 0


def test_no_metric_name_or_error_kind_written_by_hand_in_the_jar() -> None:
    by_hand = re.compile(r'\.(counter|gauge|meter|addGroup)\("|new Failure\("|kind\.equals\("')
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in JAVA.rglob("*.java")
        if path != GENERATED
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_hand.search(line)
    ]
    assert not found, found


def test_the_python_parse_function_registers_only_declared_metrics() -> None:
    source = (ROOT / "connector" / "flink" / "functions.py").read_text()
    registered = re.findall(r'\.(?:counter|gauge|meter)\("(\w+)"', source)
    assert registered and set(registered) <= set(PARSE_METRICS), set(registered) - set(PARSE_METRICS)


def test_every_metric_and_error_kind_is_documented() -> None:
    docs = (ROOT / "docs" / "flink.md").read_text()
    missing = [m for m in PARSE_METRICS + REQUEST_METRICS if f"`{m}`" not in docs]
    assert not missing, missing
    assert len(set(ERROR_KINDS)) == len(ERROR_KINDS)
