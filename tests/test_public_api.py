import pytest

import connector


def test_all_matches_public_names():
    public = {n for n in dir(connector) if not n.startswith("_")}
    modules = {
        "annotations",
        "cli",
        "parse",
        "plan",
        "report",
        "errors",
        "profiles",
        "types",
        "bench",
        "server",
        "simulator",
        "flink",
        "options",
        "params",
        "strict",
    }
    assert set(connector.__all__) == public - modules
    # The names load on first use: each must resolve to the object its module defines.
    for name in connector.__all__:
        assert getattr(connector, name) is not None
    with pytest.raises(AttributeError):
        _ = connector.not_a_name


def test_doctest_example():
    assert connector.parse_batch([b'{"id": "c1", "created": 0}'], backend="cpu").table.column("id").to_pylist() == [
        "c1"
    ]
