"""The plan is declared once (connector/plan/records.py): the planner writes its records with one function that
refuses a value of another type, the jar's records and reader are generated from the declaration (the committed
files are current), and no Java code outside the generated reader reads a plan key by its name."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from connector.plan import records as plan_types
from connector.plan.format import format_plan
from connector.plan.model import model_plan
from connector.plan.records import Layout, NameType, RowField, Source, to_json
from connector.plan.table import table_plan as plan

ROOT = Path(__file__).resolve().parents[1]
JAVA = ROOT / "java" / "src" / "main" / "java" / "io" / "dspark" / "vllm"
GENERATED = JAVA / "plan"

STRING = {"sql": "VARCHAR(2147483647)", "root": "VARCHAR"}


def test_the_generated_java_is_what_the_declaration_makes():
    done = subprocess.run(
        [sys.executable, "-m", "connector.plan.records", "--check", str(GENERATED)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stale_generated_file_is_named_with_the_command_that_makes_it(tmp_path):
    for name, text in plan_types.java_sources().items():
        (tmp_path / name).write_text(text)
    (tmp_path / "PlanReader.java").write_text("// edited by hand\n")
    done = subprocess.run(
        [sys.executable, "-m", "connector.plan.records", "--check", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "PlanReader.java" in done.stderr and "Plan.java" not in done.stderr
    assert "python -m connector.plan.records --java" in done.stderr


def test_no_java_code_reads_a_plan_key_by_its_name():
    """Outside the generated reader, no `.get("key")`/`.path("key")`/`.has("key")` of a key of the plan: a key the
    declaration has is read through the generated records only."""
    keys = set()
    for cls in plan_types.RECORDS:
        keys |= {f.name.removesuffix("_") for f in plan_types.dataclasses.fields(cls)}
    # The native core's plan document is the planner's too (`NativePlan.of`): the JVM hands it to the core as it
    # is, and reads the core's result by the plan's typed columns (`NativeRead`).
    keys |= _native_document_keys()
    # JSON that is not the plan's: an answer field's JSON schema (Answers), a server's error body (Failure), the
    # usage of a stored response (StoredRequests), HTTP headers and Netty's pipeline (Transport), the declared
    # table the factory sends the planner (PythonPlanner).
    exempt = {"request/Failure.java", "store/StoredRequests.java", "request/Transport.java"}
    not_the_plan = {
        "engine/Answers.java": {"type", "items", "properties", "enum", "anyOf"},
        "sql/PythonPlanner.java": {"columns", "kind", "name"},
    }
    found = []
    for path in sorted(JAVA.rglob("*.java")):
        rel = path.relative_to(JAVA).as_posix()
        if rel.startswith("plan/") or rel in exempt:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for key in re.findall(r'\.(?:get|path|has)\("([a-z_]+)"\)', line):
                if key in keys and key not in not_the_plan.get(rel, ()):
                    found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def _native_document_keys() -> set[str]:
    """Every key of the native core's plan document, with content properties (`NativePlan.of`)."""
    from connector.parse.native import NativePlan
    from connector.profiles import load_profile
    from connector.types.columns import body_columns

    keys: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            keys.update(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for name in ("openai", "coder"):
        profile = load_profile(name)
        walk(
            json.loads(NativePlan.of(body_columns(profile), profile.created_unit, profile.content_properties).document)
        )
    assert {"columns", "paths", "content", "properties"} <= keys
    return keys


def test_the_jvm_hands_the_native_document_to_the_core_unread():
    """The JVM's parse step neither parses the core's plan document nor narrows it: the planner does
    (`connector.plan.parse.native_read`), and gives the core's result columns as typed records."""
    text = (JAVA / "parse" / "NativeParser.java").read_text()
    assert "jackson" not in text.lower(), "NativeParser reads the native plan document with Jackson"


def test_a_field_of_another_type_is_refused_where_the_plan_is_written():
    with pytest.raises(TypeError, match=r"Source.count is '10', not an integer"):
        to_json(Source(kind="rate", rate=5.0, count="10", template="{n}", table="t"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Layout has not exactly one of column, row, answer"):
        to_json(Layout(column="a", answer="b"))
    with pytest.raises(TypeError, match=r"RowField.from is None"):
        to_json(RowField(name="a", from_=None))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"NameType.name is 3"):
        to_json(NameType(3, "INT"))  # type: ignore[arg-type]


def test_records_are_written_as_the_jar_reads_them():
    nested = Layout(row=(RowField("a", Layout(column="x", default="m")), RowField("b", Layout(answer="b"))))
    assert to_json(nested) == {
        "row": [{"name": "a", "from": {"column": "x", "default": "m"}}, {"name": "b", "from": {"answer": "b"}}]
    }
    assert to_json(NameType("_body", "BYTES")) == ["_body", "BYTES"]  # a pair, as the plan has always carried
    assert to_json(Source(kind="prompts", path="/p")) == {"kind": "prompts", "path": "/p"}


def test_the_planner_writes_every_plan_through_the_records():
    """Each face's plan is made of records (to_json refuses any other value), so a key the jar does not know
    cannot be written; here the three plans' top-level keys are the declaration's."""
    columns = [{"name": "id", "kind": "physical", "type": STRING}]
    table = plan(
        {
            "name": "t",
            "options": {"connector": "dspark-vllm", "mode": "replay", "replay.path": "/data"},
            "columns": columns,
            "watermark": None,
        }
    )
    declared = {f.name.removesuffix("_") for f in plan_types.dataclasses.fields(plan_types.TablePlan)}
    assert set(table) == declared - {"request"}
    model = model_plan(
        {
            "model": "m",
            "options": {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:9/v1", "model": "m"},
            "input": [{"name": "q", "type": STRING}],
            "output": [{"name": "id", "type": STRING}],
        }
    )
    assert set(model) == {f.name for f in plan_types.dataclasses.fields(plan_types.ModelPlan)}
    made = format_plan({"format": {"on-error": "skip"}, "columns": columns})
    assert set(made) == {f.name for f in plan_types.dataclasses.fields(plan_types.FormatPlan)}


def test_the_jar_is_not_built_from_stale_plan_records(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("dspark_vllm_build_jar_test", ROOT / "java" / "build_jar.py")
    build_jar = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, build_jar)  # its dataclasses read the module's names
    spec.loader.exec_module(build_jar)
    build_jar.require_current_plan_records()  # the committed files
    folder = tmp_path / "java" / "io" / "dspark" / "vllm" / "plan"
    folder.mkdir(parents=True)
    for name, text in plan_types.java_sources().items():
        (folder / name).write_text(text)
    (folder / "Plan.java").write_text("// edited by hand\n")
    monkeypatch.setattr(build_jar, "SOURCES", tmp_path)
    with pytest.raises(SystemExit, match=r"Plan.java in .* is stale: run python -m connector.plan.records --java"):
        build_jar.require_current_plan_records()


def _planned(read: dict) -> tuple[list[str], bool]:
    document = json.loads(read["document"])
    assert document["explain"] is True
    return [c["name"] for c in document["columns"]], "content" in document


def test_the_planner_narrows_the_native_document_to_the_columns_the_row_reads():
    """What the core reads for a query is planned once, in Python (`table_read`, `format_read`, the model's plan):
    exactly the core columns its row reads, and the content part (with the body column `content`) only where a
    content property or content_error is read; the typed result columns name them in the core's order."""
    from connector.plan.__main__ import native_read_answer

    row = {
        "sql": "ROW<`prompt_tokens` BIGINT>",
        "root": "ROW",
        "fields": [{"name": "prompt_tokens", "type": {"sql": "BIGINT", "root": "BIGINT"}}],
    }
    columns = [
        {"name": "id", "kind": "physical", "type": STRING},
        {"name": "usage", "kind": "physical", "type": row},
        {"name": "language", "kind": "physical", "type": STRING},
    ]
    options = {"connector": "dspark-vllm", "mode": "replay", "replay.path": "/data", "profile": "coder"}
    table = plan({"name": "t", "options": options, "columns": columns, "watermark": None})
    read = native_read_answer({"table": table, "physical": ["usage"], "metadata": []})
    assert _planned(read) == (["prompt_tokens"], False)
    assert [c[0] for c in read["columns"]] == ["prompt_tokens"]
    read = native_read_answer({"table": table, "physical": ["id", "language"], "metadata": ["error.reason"]})
    names, content = _planned(read)
    assert content and names == ["id", "content"]  # a content property keeps the content and its body column
    assert [c[0] for c in read["columns"]][:2] == ["id", "content"] and read["columns"][-1][0] == "content_error"

    fmt = format_plan({"format": {"on-error": "skip", "profile": "coder"}, "columns": columns})
    read = native_read_answer({"format": fmt, "physical": ["id"]})
    assert _planned(read) == (["id"], False)
    model = model_plan(
        {
            "model": "m",
            "options": {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:9/v1", "model": "m"},
            "input": [{"name": "q", "type": STRING}],
            "output": [{"name": "id", "type": STRING}, {"name": "finish_reason", "type": STRING}],
        }
    )
    assert _planned(model["native"]["read"]) == (["id", "finish_reason"], False)


def _three_plans() -> dict[type, dict]:
    """A table's (with answer fields and metadata), a model's and a format's plan, as the planner writes them."""
    answer = {"name": "verdict", "kind": "physical", "type": {"sql": "BOOLEAN", "root": "BOOLEAN"}}
    columns = [{"name": "id", "kind": "physical", "type": STRING}, answer]
    reason = {"name": "reason", "kind": "metadata", "key": "error.reason", "type": STRING}
    options = {"connector": "dspark-vllm", "mode": "replay", "replay.path": "/data"}
    table = plan({"name": "t", "options": options, "columns": [*columns, reason], "watermark": None})
    model = model_plan(
        {
            "model": "m",
            "options": {"provider": "dspark-vllm", "endpoint": "http://127.0.0.1:9/v1", "model": "m"},
            "input": [{"name": "q", "type": STRING}],
            "output": [{"name": "id", "type": STRING}, {"name": "finish_reason", "type": STRING}],
        }
    )
    fmt = format_plan({"format": {"on-error": "skip"}, "columns": columns})
    return {plan_types.TablePlan: table, plan_types.ModelPlan: model, plan_types.FormatPlan: fmt}


def test_a_written_plan_reads_back_as_its_records():
    """`from_json`, the one reader of a written plan in Python (the scan's question hands the plan back), reads
    what `to_json` wrote: the same records."""
    for cls, written in _three_plans().items():
        read = plan_types.from_json(cls, json.loads(json.dumps(written)))
        assert type(read) is cls and to_json(read) == written


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda p: p.update(extra=1), "the table's plan.extra is no key of this plan"),
        (lambda p: p.pop("answer"), "the table's plan.answer is missing"),
        (lambda p: p["physical"]["id"].pop("needs"), "the table's plan.physical.id.needs is missing"),
        (lambda p: p["physical"]["id"].update(needz=["id"]), "the table's plan.physical.id.needz is no key"),
        (lambda p: p["physical"]["id"].update(needs="id"), "the table's plan.physical.id.needs is not an array"),
        (lambda p: p["physical"]["id"].update(needs=[3]), r"the table's plan.physical.id.needs\[0\] is not a string"),
        (lambda p: p["metadata"][0].update(key=None), r"the table's plan.metadata\[0\].key is null"),
        (lambda p: p["flat"].append(["a", "b"]), r"the table's plan.flat\[\d+\] is not an object"),
        (lambda p: p["parse_inputs"].append(["a"]), r"the table's plan.parse_inputs\[2\] is not an array of 2"),
        (lambda p: p["metadata"][0]["from"].update(answer="x"), "has not exactly one of column, row, answer"),
        (lambda p: p.update(bounded="yes"), "the table's plan.bounded is not true or false"),
        (lambda p: p.update(version=1), "the table's plan is of version 1, this package reads version"),
    ],
)
def test_the_python_reader_refuses_a_plan_as_the_jars_does(change, said):
    """Strict as the generated PlanReader: a key the record has not, one it needs and lacks, a value of another
    type, a plan of another version, each refused in one line that names it."""
    written = json.loads(json.dumps(_three_plans()[plan_types.TablePlan]))
    change(written)
    with pytest.raises(ValueError, match=said):
        plan_types.from_json(plan_types.TablePlan, written)


def test_the_scan_reads_the_plan_it_is_handed_as_records():
    """What the core reads for a scan came from the plan read by key: a plan without its `answer` was read as one
    without answer fields (fewer core columns), an unknown key passed unseen."""
    from connector.plan.__main__ import native_read_answer

    plans = _three_plans()
    table = json.loads(json.dumps(plans[plan_types.TablePlan]))
    assert table["answer"] is not None
    table.pop("answer")
    with pytest.raises(ValueError, match="the table's plan.answer is missing"):
        native_read_answer({"table": table, "physical": ["id"], "metadata": []})
    fmt = {**plans[plan_types.FormatPlan], "physcal": {}}
    with pytest.raises(ValueError, match="the format's plan.physcal is no key of this plan"):
        native_read_answer({"format": fmt, "physical": ["id"]})


def _keys_read_by_name(path: Path) -> set[str]:
    """The string keys `path` reads by name: `x["key"]`, `x.get("key")`, `x.pop("key")`."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
    return {k for k in found if isinstance(k, str)}


def test_no_python_code_reads_a_plan_key_by_its_name():
    """A written plan is read back through `from_json` (the scan's question hands the planner a table's or the
    format's plan), never by key, as in Java: outside records.py no module reads a key only the plan has."""
    keys = set()
    for cls in plan_types.RECORDS:
        keys |= {f.name.removesuffix("_") for f in plan_types.dataclasses.fields(cls)}
    # Words the other JSON the package reads has too: a declared table's columns and types (name, kind, type, key,
    # fields, columns), a profile (path, profile), an OpenAI body (model, messages, prompt, max_tokens, text,
    # index, version), a JSON schema (schema), a model's options (chat, column, system, template, mode).
    words = {"name", "kind", "type", "key", "fields", "columns", "path", "profile", "model", "messages", "prompt"}
    words |= {"max_tokens", "text", "index", "version", "schema", "chat", "column", "system", "template", "mode"}
    not_the_plan = {
        # the scan's question (io.dspark.vllm.sql.PythonPlanner): the plan, the projection's columns and keys
        "plan/__main__.py": {"table", "plan", "physical", "metadata"},
        "plan/parse_function.py": {"table", "require_created"},  # its own document, the plan's JSON `plan`
    }
    package = ROOT / "connector"
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == "plan/records.py":
            continue
        read = (_keys_read_by_name(path) & keys) - words - not_the_plan.get(rel, set())
        found += [f"{rel}: {key}" for key in sorted(read)]
    assert not found, found
