"""The one declaration of the native core's C ABI contract: its versions, the JSON depth limit, return codes,
verdicts, content verdicts, the column kinds a plan names, and the layout in which the JNI shim hands a result to
Java. Four files are generated from it and committed:
- native/dspark_contract.h: the core's (included by dspark_core.h; dspark_core.cpp and the JNI shim use it);
- connector/parse/_core_contract.py: the Python loader's (connector/parse/native.py);
- connector/_json_rules.py: the JSON rules the core shares with connector/strict.py (its depth limit);
- java/src/main/java/io/dspark/vllm/parse/CoreContract.java: the JVM's (NativeCore, NativeParser).
native/build_native.py and java/build_jar.py refuse to build from a stale file (one line: run this), and
tests/test_core_contract.py fails on one. Change a code or a kind here, then run from anywhere:
    python native/contract.py           (writes the four files)
    python native/contract.py --check   (exit 1, naming the stale files)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "native" / "dspark_contract.h"
MODULE = ROOT / "connector" / "parse" / "_core_contract.py"
RULES = ROOT / "connector" / "_json_rules.py"
JAVA = ROOT / "java" / "src" / "main" / "java" / "io" / "dspark" / "vllm" / "parse" / "CoreContract.java"

# The version of the ABI (dspark_parse, the codes below and the columns of its result) and of the plan.
ABI_VERSION = 2
PLAN_VERSION = 2  # 2: "explain"; a plan of version 1 is refused

# At most this many levels of arrays and objects in a body or a content (docs/json.md: why 64), and the reason a
# deeper one is refused with: the core's fast pass and exact path and strict.py's screen and `loads` apply it.
DEPTH_LIMIT = 64
TOO_DEEP_REASON = f"nested too deeply: more than {DEPTH_LIMIT} levels of arrays and objects"

# (name, value, meaning): what dspark_parse returns. On anything but DONE, `out` and `out_schema` are left
# untouched and `error` holds a message.
RETURN_CODES = [
    ("DONE", 0, ""),
    ("BAD_PLAN", 1, ""),
    ("BAD_INPUT", 2, "offsets not increasing or beyond data_len"),
    ("OUTPUT_TOO_LARGE", 3, "a string column over 2^31 - 1 bytes: give fewer bodies at a time"),
    ("INTERNAL", 4, "out of memory, or a defect"),
]

# A body's verdict (column "verdict", int8). With "explain", the category of the body's error (its reason is
# in column "reason"); without it, why the fast pass left the body to the caller's exact path.
VERDICTS = [
    ("OK", 0, ""),
    ("NOT_JSON", 1, "the grammar, UTF-8, escapes, literals, numbers, trailing data, empty"),
    ("NOT_OBJECT", 2, "one JSON value, but not an object"),
    ("TOO_DEEP", 3, f"more than {DEPTH_LIMIT} levels of arrays and objects"),
    ("BYTE_ORDER_MARK", 4, "starts with U+FEFF"),
    ("WRONG_TYPE", 5, "a value on a column's path is not of the column's type"),
    ("ERROR_RESPONSE", 6, '`error` not null, or `"object": "error"`'),
    ("OUT_OF_RANGE", 7, "an integer beyond 64 bits, a timestamp outside years 1..9999"),
    ("REPEATED_NAME", 8, "without explain: a name the plan reads appears twice in one object"),
    ("TOO_LARGE", 9, "longer than the plan's max_body_bytes: refused by size, never read"),
    ("UNSUPPORTED", 10, "without explain: a form the fast pass leaves (e.g. `5.0` as an int)"),
]

# A content's verdict (column "content_verdict", int8), for bodies that are OK.
CONTENT_VERDICTS = [
    ("CONTENT_JSON", 0, "starts like JSON: read into the content columns (and content_error)"),
    ("CONTENT_NULL", 1, "no content (also a body that is not a row): every column null, no error"),
    ("CONTENT_TEXT", 2, "not like JSON (after one optional ```json fence): free text, for x-extract patterns"),
    ("CONTENT_DEFERRED", 3, "without explain: starts like JSON, left to the reference"),
]

# The kinds a plan's column or content property names ("kind", and "item_kind" of an array), each with the
# Arrow C data interface format of its values (an "array" is a list, "+l", of its item kind).
KINDS = [
    ("string", "u"),
    ("integer", "l"),
    ("number", "g"),
    ("boolean", "b"),
    ("any", "u"),  # any JSON value, as its JSON text
    ("length", "l"),  # the number of items of an array
    ("timestamp", "l"),  # milliseconds since the epoch, from the plan's created unit
    ("json", "u"),  # the content: a string holding JSON, read by the plan's content properties
    ("array", "+"),
]

# The JNI shim's result (native/jni/dspark_jni.c -> java/.../parse/ArrowColumn.java): the core's Arrow struct
# array copied into one Java byte[] in one call (a call per buffer would cost more than the parse of a small
# batch), all little-endian and unaligned:
#   int32 number of columns; per column: int32 name length, the name's UTF-8, the array;
#   an array: the header below, the validity bytes (none when the array has no nulls), then by its type:
#     UTF8: int32 offsets (offset + length + 1), int64 data bytes and them; INT64/FLOAT64: 8 bytes a value;
#     BOOL: the bits; INT8: a byte a value; LIST: int32 offsets, then the child array.
# Each type's code is the first character of the Arrow format it is copied from (a timestamp is INT64).
RESULT_TYPES = [("UTF8", "u"), ("INT64", "l"), ("FLOAT64", "g"), ("BOOL", "b"), ("INT8", "c"), ("LIST", "+")]
# (field, bytes) of an array's header, in order.
RESULT_ARRAY_HEADER = [("TYPE", 1), ("LENGTH", 8), ("OFFSET", 8), ("VALIDITY_BYTES", 4)]


def _header_offsets() -> list[tuple[str, int]]:
    """Where each field of an array's header starts, and the header's size (`BYTES`)."""
    out, at = [], 0
    for name, size in RESULT_ARRAY_HEADER:
        out.append((f"{name}_AT", at))
        at += size
    return [*out, ("BYTES", at)]


def _origin() -> str:
    return "Generated by native/contract.py from its declaration: do not edit; change it there and run it."


def header() -> str:
    def enum(rows: list[tuple[str, int, str]]) -> list[str]:
        width = max(len(f"  DSPARK_{n} = {v},") for n, v, _ in rows)
        out = ["enum {"]
        for k, (name, value, meaning) in enumerate(rows):
            text = f"  DSPARK_{name} = {value}" + ("," if k < len(rows) - 1 else "")
            out.append(f"{text:<{width}} /* {meaning} */" if meaning else text)
        return [*out, "};"]

    lines = [
        f"/* {_origin()} */",
        "#ifndef DSPARK_CONTRACT_H",
        "#define DSPARK_CONTRACT_H",
        "",
        "/* The version of this ABI (dspark_parse, the verdict codes and the columns of its result), and of the",
        ' * plan (2: "explain"; a plan of version 1 is refused). */',
        f"#define DSPARK_ABI_VERSION {ABI_VERSION}",
        f"#define DSPARK_PLAN_VERSION {PLAN_VERSION}",
        "",
        "/* At most this many levels of arrays and objects in a body or a content, and the reason a deeper one is",
        " * refused with (strict.py applies the same: connector/_json_rules.py). */",
        f"#define DSPARK_DEPTH_LIMIT {DEPTH_LIMIT}",
        f'#define DSPARK_TOO_DEEP_REASON "{TOO_DEEP_REASON}"',
        "",
        '/* A body\'s verdict (column "verdict", int8). With "explain", the category of the body\'s error (its',
        ' * reason is in column "reason"); without it, why the fast pass left the body to the caller\'s exact path.',
        " */",
        *enum(VERDICTS),
        "",
        '/* A content\'s verdict (column "content_verdict", int8), for bodies that are DSPARK_OK. */',
        *enum(CONTENT_VERDICTS),
        "",
        "/* Return codes of dspark_parse. On anything but DSPARK_DONE, `out` and `out_schema` are left untouched",
        " * and `error` holds a message. */",
        *enum(RETURN_CODES),
        "",
        '/* The kinds a plan names ("kind", "item_kind"): X(name, KIND), for a table of one\'s own. */',
        "#define DSPARK_KINDS(X) \\",
        *(
            f'  X("{name}", {name.upper()}){" " if k < len(KINDS) - 1 else ""}{chr(92) if k < len(KINDS) - 1 else ""}'
            for k, (name, _) in enumerate(KINDS)
        ),
        "",
        "/* The JNI shim's result, one byte[] (its layout: native/contract.py): the type codes of an array and",
        " * where the fields of its header start. */",
        *(f"#define DSPARK_RESULT_{name} '{code}'" for name, code in RESULT_TYPES),
        *(f"#define DSPARK_ARRAY_HEADER_{name} {value}" for name, value in _header_offsets()),
        "",
        "#endif",
    ]
    return "\n".join(lines) + "\n"


def module() -> str:
    def consts(rows: list[tuple[str, int, str]]) -> list[str]:
        return [f"{name} = {value}" + (f"  # {meaning}" if meaning else "") for name, value, meaning in rows]

    lines = [
        f'"""{_origin()}',
        "",
        "The native core's C ABI contract (native/contract.py): versions, return codes, verdicts, content verdicts",
        'and the kinds a plan names with the Arrow format of their values."""',
        "",
        f"ABI_VERSION = {ABI_VERSION}",
        f"PLAN_VERSION = {PLAN_VERSION}",
        "",
        "# Return codes of dspark_parse",
        *consts(RETURN_CODES),
        "",
        "# A body's verdict (column 'verdict')",
        *consts(VERDICTS),
        "",
        "# A content's verdict (column 'content_verdict')",
        *consts(CONTENT_VERDICTS),
        "",
        "# The type codes of the result's arrays (the JNI shim's, read by the JVM)",
        *(f'RESULT_{name} = "{code}"' for name, code in RESULT_TYPES),
        "",
        "# kind -> the Arrow format of its values",
        "KINDS = {",
        *(f'    "{name}": "{fmt}",' for name, fmt in KINDS),
        "}",
    ]
    return "\n".join(lines) + "\n"


def rules() -> str:
    lines = [
        f'"""{_origin()}',
        "",
        "The JSON rules the native core shares with connector/strict.py (native/contract.py): at most DEPTH_LIMIT",
        'levels of arrays and objects, a deeper text refused with TOO_DEEP_REASON."""',
        "",
        f"DEPTH_LIMIT = {DEPTH_LIMIT}",
        f'TOO_DEEP_REASON = "{TOO_DEEP_REASON}"',
    ]
    return "\n".join(lines) + "\n"


def java() -> str:
    def consts(rows: list[tuple[str, int, str]]) -> list[str]:
        out = []
        for name, value, meaning in rows:
            if meaning:
                out.append(f"    /** {meaning.replace('*/', '* /')} */")
            out.append(f"    public static final int {name} = {value};")
        return out

    lines = [
        "package io.dspark.vllm.parse;",
        "",
        "import java.util.Map;",
        "",
        f"/** {_origin()}",
        " *",
        " * <p>The native core's C ABI contract (native/contract.py): versions, return codes, verdicts, content",
        " * verdicts and the kinds a plan names with the Arrow format of their values. */",
        "public final class CoreContract {",
        "    private CoreContract() {}",
        "",
        f"    public static final int ABI_VERSION = {ABI_VERSION};",
        f"    public static final int PLAN_VERSION = {PLAN_VERSION};",
        "",
        "    // Return codes of dspark_parse",
        *consts(RETURN_CODES),
        "",
        '    // A body\'s verdict (column "verdict")',
        *consts(VERDICTS),
        "",
        '    // A content\'s verdict (column "content_verdict")',
        *consts(CONTENT_VERDICTS),
        "",
        "    // The JNI shim's result, one byte[] (its layout: native/contract.py): the type codes of an array and",
        "    // where the fields of its header start.",
        *(f"    public static final char RESULT_{name} = '{code}';" for name, code in RESULT_TYPES),
        *(f"    public static final int ARRAY_HEADER_{name} = {value};" for name, value in _header_offsets()),
        "",
        "    /** kind -> the Arrow format of its values. */",
        "    public static final Map<String, Character> KINDS = Map.of(",
        *(
            f"            \"{name}\", '{fmt}'{',' if k < len(KINDS) - 1 else ');'}"
            for k, (name, fmt) in enumerate(KINDS)
        ),
        "}",
    ]
    return "\n".join(lines) + "\n"


def generated() -> dict[Path, str]:
    return {HEADER: header(), MODULE: module(), RULES: rules(), JAVA: java()}


def stale() -> list[Path]:
    """The generated files that are missing or differ from what the declaration makes."""
    return [p for p, text in generated().items() if not p.exists() or p.read_text() != text]


def require_current() -> None:
    """For the builds: one line and exit when a generated file is stale."""
    found = stale()
    if found:
        names = ", ".join(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in found)
        raise SystemExit(f"dspark-vllm: {names} differ from native/contract.py: run `python native/contract.py`")


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        found = stale()
        for p in found:
            print(f"stale: {p.relative_to(ROOT)}")
        return 1 if found else 0
    if argv:
        print("usage: python native/contract.py [--check]", file=sys.stderr)
        return 2
    for path, text in generated().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
