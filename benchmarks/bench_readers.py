"""Which CPU JSON reader could carry the CPU backend: each reads the same 10k-body batch, one core.

The CPU backend's speed is bounded by its JSON reader (see docs/benchmarks.md). This measures the readers a
CPU backend could be built on, on the benchmark corpus, each asked for the same fields where it takes a
schema, and prints MB/s and the ratio to pyarrow.json (the CPU backend's reader until issue 11, msgspec
structs until issue 17; since then the native core, `connector.parse.native`), the readers taking turns, in CPU time
(a shared machine inflates the wall clock several times over). Readers that are
not installed are skipped: `pip install polars duckdb orjson msgspec` for the full table.

    python benchmarks/bench_readers.py [--bodies 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("POLARS_MAX_THREADS", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.json as pa_json  # noqa: E402

from connector.parse import native  # noqa: E402
from connector.parse.plan import plan_for  # noqa: E402
from connector.profiles import load_profile  # noqa: E402
from connector.simulator.responses import make_corpus  # noqa: E402


def _duckdb_type(t: pa.DataType) -> str:
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f'"{f.name}" {_duckdb_type(f.type)}' for f in t) + ")"
    if pa.types.is_list(t):
        return _duckdb_type(t.value_type) + "[]"
    return {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN"}.get(t, "VARCHAR")


def readers(bodies: list[bytes], profile: str, tmp: Path) -> dict[str, Callable[[], object]]:
    plan = plan_for(load_profile(profile))
    schema = plan.read_schema
    data = b"\n".join(bodies)
    path = tmp / "bodies.ndjson"
    path.write_bytes(data)
    out: dict[str, Callable[[], object]] = {}

    def pyarrow_json() -> object:
        options = pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1)
        parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        return pa_json.read_json(io.BytesIO(data), read_options=options, parse_options=parse)

    out["pyarrow.json, explicit schema"] = pyarrow_json
    one_field = pa.schema([("id", pa.string())])
    out["pyarrow.json, one field (its tokenizer alone)"] = lambda: pa_json.read_json(
        io.BytesIO(data),
        read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
        parse_options=pa_json.ParseOptions(explicit_schema=one_field, unexpected_field_behavior="ignore"),
    )
    try:
        import duckdb

        con = duckdb.connect()
        con.execute("SET threads = 1")
        columns = "{" + ", ".join(f"'{f.name}': '{_duckdb_type(f.type)}'" for f in schema) + "}"
        query = f"SELECT * FROM read_json('{path}', format = 'newline_delimited', columns = {columns})"
        out["duckdb read_json, same columns"] = lambda: con.sql(query).to_arrow_table()
    except ImportError:
        pass
    try:
        import polars as pl

        pl_schema = pl.from_arrow(schema.empty_table()).schema  # type: ignore[union-attr]
        out["polars read_ndjson, same schema"] = lambda: pl.read_ndjson(io.BytesIO(data), schema=pl_schema)
    except ImportError:
        pass
    import simdjson

    joined = pa.py_buffer(b"".join(bodies))
    offsets = np.zeros(len(bodies) + 1, np.int64)
    np.cumsum([len(b) for b in bodies], out=offsets[1:])
    out["native core, every column + content properties (cpu)"] = lambda: native.read(plan.native, joined, offsets)
    body_only = plan_for(load_profile(profile), [c.name for c in plan.columns]).native
    out["native core, every body column"] = lambda: native.read(body_only, joined, offsets)
    one = plan_for(load_profile(profile), ["id"]).native
    out["native core, one column (the rules checked on all)"] = lambda: native.read(one, joined, offsets)
    try:
        import msgspec

        array = b"[" + b",".join(bodies) + b"]"
        out["msgspec, to Python objects (no columns yet)"] = lambda: msgspec.json.decode(array)
    except ImportError:
        pass

    def simdjson_validate() -> object:
        parse = simdjson.Parser().parse
        return [type(parse(b)) is simdjson.Object for b in bodies]

    out["simdjson, validation only (the JSON screen's parser)"] = simdjson_validate
    try:
        import orjson

        out["orjson per body, to Python objects (no columns yet)"] = lambda: [orjson.loads(b) for b in bodies]
    except ImportError:
        pass
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", default="coder")
    args = parser.parse_args()
    bodies = make_corpus(args.bodies, args.profile, seed=7, json_share=0.8)
    size = sum(map(len, bodies))
    print(f"{len(bodies)} bodies, {size / 1e6:.1f} MB ({args.profile} corpus); CPU time, best of {args.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = readers(bodies, args.profile, Path(tmp))
        best = dict.fromkeys(paths, float("inf"))
        for _ in range(args.repeat):
            for name, read in paths.items():
                started = time.process_time()
                read()
                best[name] = min(best[name], time.process_time() - started)
    results = list(best.items())
    base = results[0][1]
    print(f"\n{'reader':<56} {'ms':>8} {'MB/s':>8} {'x pyarrow':>10}")
    for name, seconds in results:
        print(f"{name:<56} {seconds * 1e3:>8.1f} {size / seconds / 1e6:>8.1f} {base / seconds:>9.2f}x")


if __name__ == "__main__":
    main()
