import connector


def test_all_matches_public_names():
    public = {n for n in dir(connector) if not n.startswith("_")}
    modules = {
        "annotations",
        "cli",
        "decode",
        "errors",
        "profiles",
        "schema",
        "bench",
        "client",
        "simulator",
        "flink",
        "options",
    }
    assert set(connector.__all__) == public - modules


def test_doctest_example():
    assert connector.parse_batch([b'{"id": "c1", "created": 0}'], backend="cpu").table.column("id").to_pylist() == [
        "c1"
    ]
