"""Schema discovery against the simulator (as a gateway with /health/json-schema, and as a plain vLLM),
the TTL cache, the `columns` CLI, and the Arrow -> Flink SQL type mapping."""

from __future__ import annotations

import json
import logging
import socket

import pyarrow as pa
import pytest

from connector.cli import main
from connector.errors import OptionsError, SchemaDiscoveryError
from connector.profiles import load_profile
from connector.server.discovery import DiscoveredSchema, SchemaCache, discover_schema
from connector.simulator.testing import serve_simulator
from connector.types.columns import output_schema
from connector.types.flink_types import arrow_to_flink_sql, ddl_columns


@pytest.mark.parametrize(
    ("dtype", "sql"),
    [
        (pa.timestamp("ms", tz="UTC"), "TIMESTAMP(3)"),
        (pa.timestamp("us"), "TIMESTAMP(6)"),
        (pa.int64(), "BIGINT"),
        (pa.int32(), "INT"),
        (pa.int16(), "SMALLINT"),
        (pa.int8(), "TINYINT"),
        (pa.float64(), "DOUBLE"),
        (pa.float32(), "FLOAT"),
        (pa.string(), "STRING"),
        (pa.large_string(), "STRING"),
        (pa.bool_(), "BOOLEAN"),
        (pa.binary(), "BYTES"),
        (pa.date32(), "DATE"),
        (pa.decimal128(10, 2), "DECIMAL(10, 2)"),
        (pa.list_(pa.string()), "ARRAY<STRING>"),
        (pa.list_(pa.field("x", pa.int64(), nullable=False)), "ARRAY<BIGINT NOT NULL>"),
        (pa.list_(pa.list_(pa.int64())), "ARRAY<ARRAY<BIGINT>>"),
        (pa.struct([("a", pa.int64()), ("b`c", pa.string())]), "ROW<`a` BIGINT, `b``c` STRING>"),
        (pa.map_(pa.string(), pa.float64()), "MAP<STRING NOT NULL, DOUBLE>"),
    ],
)
def test_arrow_to_flink_sql(dtype: pa.DataType, sql: str) -> None:
    assert arrow_to_flink_sql(dtype) == sql


def test_arrow_to_flink_sql_refuses_what_flink_lacks() -> None:
    with pytest.raises(TypeError, match="no Flink SQL type for the Arrow type null"):
        arrow_to_flink_sql(pa.null())


def test_ddl_columns() -> None:
    schema = pa.schema([pa.field("line", pa.int64(), nullable=False), ("created", pa.timestamp("ms", tz="UTC"))])
    assert ddl_columns(schema) == "  `line` BIGINT NOT NULL,\n  `created` TIMESTAMP(3)"


def test_from_health_json_schema() -> None:
    with serve_simulator(profiles=("vl",)) as sim:
        found = discover_schema(sim.url + "/v1")
    assert (found.source, found.endpoint, found.profile.name) == ("json-schema", sim.url, "vl")
    assert found.detail == f"{sim.url}/health/json-schema (dspark-vllm-simulator (vLLM 0.32.0 shape))"
    assert found.models == ("deepseek-ai/deepseek-vl2-tiny",)
    assert found.added_fields == () and found.notes == ()
    assert found.arrow_schema() == output_schema(load_profile("vl"))
    assert "  `created` TIMESTAMP(3),\n" in found.ddl()
    assert found.json_schema() == load_profile("vl").response_json_schema()


def test_the_ddl_is_what_a_table_can_declare() -> None:
    """The DDL `dspark-vllm columns` prints, pasted into a 'dspark-vllm' table, plans: it printed `line BIGINT NOT
    NULL` first, which a table refused (no such body column, and NOT NULL)."""
    from connector.plan.table import table_plan as plan

    with serve_simulator(profiles=("coder",)) as sim:
        found = discover_schema(sim.url)
    columns = []
    for line in found.ddl().splitlines():
        name, sql = line.strip().rstrip(",").split(" ", 1)
        columns.append({"name": name.strip("`"), "kind": "physical", "type": {"sql": sql, "nullable": True}})
    options = {"connector": "dspark-vllm", "mode": "replay", "replay.path": "/tmp/none", "profile": "coder"}
    made = plan({"name": "t", "options": options, "columns": columns, "watermark": None})
    assert list(made["physical"]) == [c["name"] for c in columns]
    assert "line" not in made["physical"] and len(columns) > 20


def test_a_new_served_field_becomes_a_column() -> None:
    with serve_simulator(profiles=("coder",), extra_fields={"trace_id": "t-1", "cost": 0.5, "tags": ["a"]}) as sim:
        found = discover_schema(sim.url)
    assert found.added_fields == ("trace_id", "cost")
    assert found.notes == ("field 'tags' (array) is not a primitive: not a column",)
    schema = found.arrow_schema()
    assert (schema.field("trace_id").type, schema.field("cost").type) == (pa.string(), pa.float64())
    assert schema.names.index("trace_id") < schema.names.index("language")  # body columns, then content


def test_a_profile_asked_for_keeps_its_content_schema() -> None:
    with serve_simulator(profiles=("coder",)) as sim:
        found = discover_schema(sim.url, profile="math")
    assert found.profile.content_schema == load_profile("math").content_schema
    assert found.notes == ("the server describes profile 'coder'; using 'math' as asked",)


def test_plain_vllm_by_version_and_models() -> None:
    with serve_simulator(profiles=("math",), json_schema=False, max_model_len=4096, version="0.32.1") as sim:
        found = discover_schema(sim.url)
    assert (found.source, found.server, found.max_model_len) == ("vllm", "vLLM 0.32.1", 4096)
    assert found.models == ("Qwen/Qwen2.5-Math-7B-Instruct",)
    assert found.profile.name == "math"  # matched by the model name
    assert found.detail == f"vLLM 0.32.1 at {sim.url} (/version, /v1/models), built-in vLLM body shape"
    assert found.arrow_schema() == output_schema(load_profile("math"))


def test_probe_confirms_and_finds_new_fields() -> None:
    with serve_simulator(profiles=("openai",), json_schema=False, extra_fields={"trace_id": "x"}) as sim:
        plain = discover_schema(sim.url)
        probed = discover_schema(sim.url, probe=True)
        requests = sim.stats()["requests /v1/chat/completions"]
    assert plain.added_fields == ()
    assert (probed.source, probed.added_fields, probed.notes) == ("vllm+probe", ("trace_id",), ())
    assert probed.detail.endswith(", confirmed by a probe request")
    assert probed.arrow_schema().field("trace_id").type == pa.string()
    assert requests == 1


def test_errors_are_one_clear_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SchemaDiscoveryError, match=rf"^cannot connect to http://127.0.0.1:{port}: .*Is the server"):
        discover_schema(f"http://127.0.0.1:{port}")
    with (
        serve_simulator(api_key="sk-x", json_schema=False) as sim,
        pytest.raises(
            SchemaDiscoveryError,
            match=r"/v1/models refused the request \(HTTP 401\): give the API key \(--api-key, or --api-key-env "
            r"with the name of the variable that holds it\)$",
        ),
    ):
        discover_schema(sim.url)
    with pytest.raises(OptionsError, match=r"the endpoint must be an http\(s\) URL"):
        discover_schema("localhost:8000")


def test_tls_failure(tls_server_context) -> None:  # type: ignore[no-untyped-def]
    with serve_simulator(ssl_context=tls_server_context) as sim:
        with pytest.raises(
            SchemaDiscoveryError,
            match=r"^TLS verification failed for https://127.0.0.1:\d+: the server's certificate does not verify: "
            r"127\.0\.0\.1:\d+: self-signed certificate\. Give the CA that signed the server's certificate "
            r"\(--ca-bundle\), or pass --insecure only for a server you trust$",
        ):
            discover_schema(sim.url)
        assert discover_schema(sim.url, verify=False).source == "json-schema"


def test_cache_notices_a_changed_schema_after_the_ttl(caplog) -> None:  # type: ignore[no-untyped-def]
    now = [0.0]
    changed: list[tuple[DiscoveredSchema, DiscoveredSchema]] = []
    caplog.set_level(logging.INFO, logger="connector.types")
    with serve_simulator(profiles=("vl",)) as sim:
        cache = SchemaCache(ttl_s=60, clock=lambda: now[0], on_change=lambda old, new: changed.append((old, new)))
        first = cache.get(sim.url)
        assert sim.simulator is not None
        sim.simulator.reconfigure(extra_fields={"trace_id": "abc"})
        now[0] = 59.0
        assert cache.get(sim.url) is first  # within the TTL: no request
        now[0] = 60.0
        second = cache.get(sim.url)
        now[0] = 200.0
        third = cache.get(sim.url)  # refetched, unchanged
    assert (first.added_fields, second.added_fields, third.added_fields) == ((), ("trace_id",), ("trace_id",))
    assert second.fingerprint != first.fingerprint and third.fingerprint == second.fingerprint
    assert (cache.fetches, cache.changes) == (3, 1)
    assert [(a is first, b is second) for a, b in changed] == [(True, True)]
    assert "new fields ['trace_id']" in caplog.text


def test_cache_keeps_the_last_schema_when_the_server_is_gone(caplog) -> None:  # type: ignore[no-untyped-def]
    now = [0.0]
    with serve_simulator() as sim:
        cache = SchemaCache(ttl_s=10, retry_s=5, clock=lambda: now[0])
        first = cache.get(sim.url)
    now[0] = 11.0
    assert cache.get(sim.url) is first
    assert "refetch failed, keeping the last one: cannot connect" in caplog.text
    now[0] = 15.0
    assert cache.get(sim.url) is first
    assert cache.fetches == 2  # the failed refetch is retried only after retry_s
    cache.invalidate(sim.url)
    with pytest.raises(SchemaDiscoveryError, match="cannot connect"):
        cache.get(sim.url)


def test_cli_schema(capsys) -> None:  # type: ignore[no-untyped-def]
    with serve_simulator(profiles=("coder",), json_schema=False) as sim:
        assert main(["columns", "--endpoint", sim.url]) == 0
        out, err = capsys.readouterr()
        schema = output_schema(load_profile("coder"))
        assert out == ddl_columns(schema.remove(schema.get_field_index("line"))) + "\n"
        # The source line names the profile once (the detail says where the shape came from, the CLI which profile).
        assert err.splitlines()[0] == (
            f"-- schema source: vllm: vLLM 0.32.0 at {sim.url} (/version, /v1/models), built-in vLLM body shape;"
            " profile 'coder'"
        )
        assert main(["columns", "--endpoint", sim.url, "--format", "arrow"]) == 0
        out, _ = capsys.readouterr()
        assert out.startswith("line: int64 not null\nid: string\n")
        assert "created: timestamp[ms, tz=UTC]\n" in out
        assert main(["columns", "--endpoint", sim.url, "--format", "json-schema", "--profile", "math"]) == 0
        out, _ = capsys.readouterr()
        assert json.loads(out) == load_profile("math").response_json_schema()
    assert main(["columns", "--endpoint", sim.url]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith(f"dspark-vllm columns: cannot connect to {sim.url}")


def test_cli_simulate_rejects_a_bad_profile(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["simulate", "--profile", "nope", "--port", "0"]) == 2
    assert capsys.readouterr().err.startswith("dspark-vllm simulate: unknown profile 'nope'")


def test_an_api_key_only_when_asked_for(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # Before: $DSPARK_VLLM_API_KEY was sent to any endpoint when no key was given.
    monkeypatch.setenv("DSPARK_VLLM_API_KEY", "sk-x")
    monkeypatch.setenv("MY_KEY", "sk-x")
    monkeypatch.delenv("UNSET_KEY", raising=False)
    with serve_simulator(api_key="sk-x", json_schema=False) as sim:
        with pytest.raises(SchemaDiscoveryError, match=r"refused the request \(HTTP 401\)"):
            discover_schema(sim.url)
        assert discover_schema(sim.url, api_key="sk-x").source == "vllm"
        assert main(["columns", "--endpoint", sim.url, "--api-key-env", "MY_KEY"]) == 0
        capsys.readouterr()
        assert main(["columns", "--endpoint", sim.url, "--api-key-env", "UNSET_KEY"]) == 2  # a usage error
    _, err = capsys.readouterr()
    assert err == "dspark-vllm columns: --api-key-env: $UNSET_KEY is not set; export it, or name another one\n"


def test_discovery_from_inside_a_running_loop() -> None:
    import asyncio

    async def caller() -> str:
        return discover_schema(sim.url).source  # a blocking call made from async code

    with serve_simulator() as sim:
        assert asyncio.run(caller()) == "json-schema"
