"""Flink's own SQL Client and SQL Gateway, for real: the PyFlink wheel's bin/sql-client.sh and bin/sql-gateway.sh
with flink-sql-gateway 2.3.0 from Maven Central (deploy/maven/flink-sql-gateway.pom.xml) beside the wheel's own
opt/ jars, on a standalone cluster (jobs/standalone_cluster.sh start, sql-client, sql-gateway). The README's SQL
recipe runs through `sql-client.sh -f` and through the Gateway's REST API (open a session, execute statements,
fetch results) with only the connector jar added (`-j`, `ADD JAR`); an error in the DDL reaches the SQL
Client's user as Flink's one-line message. The 'dspark-vllm' factory plans tables with Python
(`python -m connector.plan`) in the client's JVM: the cluster's config names this Python as
'python.client.executable', which both read.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyflink")

from connector.flink.env import connector_jar  # noqa: E402
from connector.simulator import testing  # noqa: E402
from tests.cluster import SCRIPT, wait_for  # noqa: E402
from tests.maven import MavenUnavailable, maven_set  # noqa: E402

pytestmark = [pytest.mark.gateway, pytest.mark.cluster, pytest.mark.flink, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = 60


def readme_recipe(endpoint: str) -> str:
    """The README's SQL recipe as written (tests/test_recipes.py's ```sql recipe block), against `endpoint`,
    bounded to PROMPTS prompts."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Flink SQL: the `'dspark-vllm'` table") :]
    sql = re.search(r"```sql recipe\n(.*?)```", section, re.DOTALL)
    assert sql, "the README's Flink SQL section has a ```sql recipe block"
    text = sql.group(1)
    assert "'endpoint' = 'http://127.0.0.1:8000'" in text and "'prompts.count' = '200'" in text
    text = text.replace("'endpoint' = 'http://127.0.0.1:8000'", f"'endpoint' = '{endpoint}'")
    return text.replace("'prompts.count' = '200'", f"'prompts.count' = '{PROMPTS}'")


def statements(script: str) -> list[str]:
    """The statements of a script without comments (the recipe has no ';' inside quotes)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        maven_set("flink-sql-gateway")
    except MavenUnavailable as exc:
        pytest.skip(str(exc))
    folder = tmp_path_factory.mktemp("gateway-cluster")
    env = {**os.environ, "DSPARK_PYTHON": sys.executable, "DSPARK_CLUSTER_DIR": str(folder)}
    start = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert start.returncode == 0, start.stdout[-3000:] + start.stderr[-3000:]
        with testing.serve_simulator(mode="process", profiles=("coder",), seed=28) as sim:
            yield {"env": env, "dir": folder, "sim": sim}
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=120)


def sql_client(cluster: dict, script: str, name: str) -> subprocess.CompletedProcess[str]:
    path = cluster["dir"] / f"{name}.sql"
    path.write_text(script, encoding="utf-8")
    command = [str(SCRIPT), "sql-client", "-f", str(path)]
    return subprocess.run(command, env=cluster["env"], capture_output=True, text=True, timeout=420)


def tableau_rows(output: str) -> list[list[str]]:
    """The rows of the SQL Client's tableau result (`| +I | a | 1 |`), their cells stripped."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells[0] in ("+I", "-U", "+U", "-D"):
            rows.append(cells)
    return rows


def test_the_readme_recipe_through_the_sql_client(cluster):
    before = cluster["sim"].stats().get("requests /v1/chat/completions", 0)
    run = sql_client(cluster, readme_recipe(cluster["sim"].url), "recipe")
    output = run.stdout + run.stderr
    assert "[ERROR]" not in output, output[-4000:]
    rows = tableau_rows(output)
    assert rows, output[-4000:]
    # One row per window: window_start, model, responses, errors, mean completion tokens; every prompt once.
    assert {r[2] for r in rows} == {"Qwen/Qwen2.5-Coder-7B-Instruct"} and {r[0] for r in rows} == {"+I"}
    assert sum(int(r[3]) for r in rows) == PROMPTS, rows
    assert sum(int(r[4]) for r in rows) == 0, rows
    assert cluster["sim"].stats()["requests /v1/chat/completions"] - before == PROMPTS
    assert run.returncode == 0, output[-4000:]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "'parse.bakend' = 'cpu'",
            "Unsupported options found for 'dspark-vllm'. Unsupported options: parse.bakend (did you mean "
            "parse.backend?) (",
        ),
        (
            "'profile' = 'no-such-profile'",
            "unknown profile 'no-such-profile': use one of coder, math, openai, vl or the path of a profile file",
        ),
    ],
)
def test_an_error_in_the_ddl_reaches_the_sql_client_user_on_one_line(cluster, option, message):
    script = (
        "SET 'sql-client.execution.result-mode' = 'tableau';\n"
        f"CREATE TABLE t (id STRING) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', 'replay.path' = '/x', "
        f"{option});\nSELECT * FROM t;\n"
    )
    run = sql_client(cluster, script, "bad")
    output = run.stdout + run.stderr
    reason = re.search(r"\[ERROR\] Could not execute SQL statement\. Reason:\n(.*)\n", output)
    assert reason, output[-4000:]
    # Flink's exception and our message, on the one line after "Reason:", nothing of ours after it.
    assert reason.group(1).startswith(
        "org.apache.flink.table.api.ValidationException: Table 'default_catalog.default_database.t' "
        "('connector' = 'dspark-vllm'): "
    ), reason.group(1)
    assert message in reason.group(1)
    assert "\tat " not in output and "Traceback" not in output and "Caused by" not in output
    # The next line is the SQL Client's own: it ends the session (-f stops at the first error).
    after = run.stdout[run.stdout.index(reason.group(1)) + len(reason.group(1)) :]
    assert [line for line in after.splitlines() if line.strip()] == ["Shutting down the session...", "done."], after


class GatewayError(Exception):
    """An answer of the Gateway other than 200: its status and its "errors" (Flink's messages, then the trace)."""

    def __init__(self, status: int, errors: list[str]) -> None:
        super().__init__(f"HTTP {status}: " + "\n".join(errors)[:6000])
        self.status = status
        self.errors = errors


class Gateway:
    """The SQL Gateway's REST API (v3): sessions, statements, results."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            try:
                errors = json.loads(exc.read()).get("errors", [])
            except ValueError:
                errors = []
            raise GatewayError(exc.code, errors) from None

    def execute(self, session: str, statement: str) -> str:
        return self.call("POST", f"/v3/sessions/{session}/statements", {"statement": statement})["operationHandle"]

    def results(self, session: str, operation: str, timeout: float = 300) -> list[dict]:
        """Every row of an operation's result ({"kind": "INSERT", "fields": [...]}), fetched up to its end."""
        rows: list[dict] = []
        uri = f"/v3/sessions/{session}/operations/{operation}/result/0?rowFormat=JSON"

        def fetch() -> bool:
            nonlocal uri
            page = self.call("GET", uri)
            rows.extend(page.get("results", {}).get("data", []))
            if page["resultType"] == "EOS":
                return True
            uri = page["nextResultUri"]
            return False

        wait_for(f"the result of {operation}", fetch, timeout=timeout, every=0.5)
        return rows


@pytest.fixture(scope="module")
def gateway(cluster):
    port = free_port()
    log = (cluster["dir"] / "sql-gateway.out").open("w")
    process = subprocess.Popen(
        [str(SCRIPT), "sql-gateway", str(port)], env=cluster["env"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        api = Gateway(f"http://127.0.0.1:{port}")

        def up() -> bool:
            assert process.poll() is None, (cluster["dir"] / "sql-gateway.out").read_text()[-3000:]
            try:
                return api.call("GET", "/v3/info")["productName"] == "Apache Flink"
            except (urllib.error.URLError, ConnectionError):
                return False

        wait_for("the SQL Gateway's REST endpoint", up, timeout=120, every=1.0)
        yield api
    finally:
        process.terminate()  # the Gateway's JVM (the script and the wheel's scripts exec it): stopped by its pid
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def test_the_readme_recipe_through_the_gateways_rest_api(cluster, gateway):
    session = gateway.call("POST", "/v3/sessions", {"sessionName": "recipe", "properties": {}})["sessionHandle"]
    try:
        before = cluster["sim"].stats().get("requests /v1/chat/completions", 0)
        # The jar, by ADD JAR: the Gateway finds factories in the session's class loader, which ADD JAR extends
        # ('pipeline.jars' in the session's properties is not in it: "Could not find any factory for identifier
        # 'dspark-vllm'").
        *ddl, query = [f"ADD JAR '{connector_jar()}'", *statements(readme_recipe(cluster["sim"].url))]
        for statement in ddl:
            done = gateway.results(session, gateway.execute(session, statement))
            assert done == [{"kind": "INSERT", "fields": ["OK"]}], (statement, done)
        rows = gateway.results(session, gateway.execute(session, query))
        assert rows and {r["kind"] for r in rows} == {"INSERT"}, rows
        assert {r["fields"][1] for r in rows} == {"Qwen/Qwen2.5-Coder-7B-Instruct"}
        assert sum(r["fields"][2] for r in rows) == PROMPTS, rows
        assert sum(r["fields"][3] for r in rows) == 0, rows
        assert cluster["sim"].stats()["requests /v1/chat/completions"] - before == PROMPTS

        # A DDL error: the operation fails, the Gateway answers with Flink's exception and our one-line message.
        gateway.results(
            session,
            gateway.execute(
                session,
                "CREATE TABLE bad (id STRING) WITH ('connector' = 'dspark-vllm', 'mode' = 'replay', "
                "'replay.path' = '/x', 'profile' = 'no-such-profile')",
            ),
        )
        failing = gateway.execute(session, "SELECT * FROM bad")
        with pytest.raises(GatewayError) as error:
            gateway.results(session, failing)
        assert error.value.status == 500
        text = "\n".join(error.value.errors)
        assert "unknown profile 'no-such-profile': use one of coder, math, openai, vl" in text
    finally:
        gateway.call("DELETE", f"/v3/sessions/{session}")
