"""What libcudf's JSON reader really does with the inputs the GPU reader's design depends on (needs a GPU).

`connector/parse/libcudf.py` and `tests/libcudf_emulator.py` assume: records read as one JSON array, every leaf
asked for as a string gives a JSON string's value (with keep_quotes, its quoted text), a number's token text,
true/false as text, null as null. This prints, for each probe, what comes back with and without
keep_quotes, so a session with a GPU can check the assumptions in seconds (and see whether keep_quotes also
unescapes, which would allow one read instead of two). Run: `python benchmarks/libcudf_probe.py`.
"""

from __future__ import annotations

import json

import pyarrow as pa

from connector.parse import libcudf

PROBES: list[tuple[str, bytes, pa.Schema]] = [
    (
        "leaf kinds",
        b'[{"a":"x\\"y\\u00e9\\n"},{"a":12},{"a":-0},{"a":1.50},{"a":true},{"a":null},{}]',
        pa.schema([("a", pa.string())]),
    ),
    ("quoted number", b'[{"a":"12"},{"a":12}]', pa.schema([("a", pa.int64())])),
    ("object where a leaf is asked", b'[{"a":{"b":1}},{"a":[1,2]},{"a":"s"}]', pa.schema([("a", pa.string())])),
    (
        "value where an object is asked",
        b'[{"a":5},{"a":{"b":"x"}}]',
        pa.schema([("a", pa.struct([("b", pa.string())]))]),
    ),
    ("newline inside a record", b'[{"a":\n"x"},\n{"a":"y"}]', pa.schema([("a", pa.string())])),
    ("two values in one record", b'[{"a":"x"}{"a":"y"}]', pa.schema([("a", pa.string())])),
    # A record `{..}],[{..}` turns the batch into two arrays: the read must fail (or give other row counts).
    ("data after the root array", b'[{"a":"x"}],[{"a":"y"}]', pa.schema([("a", pa.string())])),
    ("20-digit integer", b'[{"a":18446744073709551616}]', pa.schema([("a", pa.string())])),
    ('empty string and "null"', b'[{"a":""},{"a":"null"}]', pa.schema([("a", pa.string())])),
    # Does strict validation refuse them? If not, libcudf gives null (JSONTypeCastTest), and the GPU reader
    # would need a check of its own (retype._decoded covers it only in the two-read way).
    ("invalid escape \\-", b'[{"a":"bad \\- escape"}]', pa.schema([("a", pa.string())])),
    ("invalid escape \\u12", b'[{"a":"\\u12"}]', pa.schema([("a", pa.string())])),
    ("lone surrogate", b'[{"a":"\\ud800"}]', pa.schema([("a", pa.string())])),
    (
        "nested lists",
        b'[{"c":[{"m":{"t":[{"f":{"n":"x"}}]}}]},{"c":[]},{"c":null}]',
        pa.schema(
            [
                (
                    "c",
                    pa.list_(
                        pa.struct(
                            [("m", pa.struct([("t", pa.list_(pa.struct([("f", pa.struct([("n", pa.string())]))])))]))]
                        )
                    ),
                )
            ]
        ),
    ),
]


def main() -> None:
    try:
        print("GpuReader start-up check: one read per batch =", libcudf.GpuReader().one_read)
    except Exception as exc:  # BackendUnavailable says why; the probes below show the details
        print(f"GpuReader start-up check failed: {type(exc).__name__}: {exc}")
    for name, data, schema in PROBES:
        print(f"== {name}: {data.decode()!r}")
        for keep_quotes in (False, True):
            try:
                table = libcudf._read(libcudf._on_device(data), schema, keep_quotes=keep_quotes)
                shown = json.dumps(table.to_pylist(), ensure_ascii=True)
                print(f"   keep_quotes={keep_quotes}: {table.schema.types} {shown}")
            except Exception as exc:  # what the reader raises is the finding
                print(f"   keep_quotes={keep_quotes}: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
