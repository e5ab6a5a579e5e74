"""Writes the fuzz targets' plans (a C header) from the project's own profiles, as connector/parse/native.py
writes them (with "explain"; some also without), plus plans that reach what no profile asks for (every column
kind, every content kind, every x-extract mode and conversion, a small column limit):
python native/fuzz/plans.py > native/fuzz/build/plans.h

The body target picks a plan by its input's first byte (index modulo the count): new plans go at the end, so
that the seeds' first bytes keep their plans. `python native/fuzz/plans.py --seeds DIR` writes every plan as
a file of DIR, the plan target's seeds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from connector.parse.plan import plan_for  # noqa: E402
from connector.profiles import load_profile  # noqa: E402

TEST_PROFILES = ("gateway_iso.yaml", "gateway_ms.yaml", "risk.yaml", "flat.yaml")
PROFILES = ["openai", "coder", "vl", "math", *(str(ROOT / "tests/data/profiles" / f) for f in TEST_PROFILES)]


def kinds_plan(unit: str, extract: bool, explain: bool = True, max_column: int | None = None) -> bytes:
    """Every column kind (also as `*` lists and coalesces) and every content property kind; with `extract`,
    patterns in every mode whose values are converted to every kind (and can fail to be)."""
    columns = [
        {"name": "model", "kind": "string", "paths": [["model"]]},
        {"name": "created", "kind": "timestamp", "paths": [["created"]]},
        {"name": "n_choices", "kind": "length", "paths": [["choices"]]},
        {"name": "tokens", "kind": "integer", "paths": [["usage", "total_tokens"], ["usage", "completion_tokens"]]},
        {"name": "rate", "kind": "number", "paths": [["metrics", "tokens_per_second"]]},
        {"name": "streamed", "kind": "boolean", "paths": [["stream"], ["choices", "0", "logprobs"]]},
        {"name": "stop", "kind": "any", "paths": [["choices", "0", "stop_reason"]]},
        {"name": "finish", "kind": "string", "paths": [["choices", "*", "finish_reason"]]},
        {"name": "indexes", "kind": "integer", "paths": [["choices", "*", "index"]]},
        {"name": "scores", "kind": "number", "paths": [["choices", "*", "score"]]},
        {"name": "oks", "kind": "boolean", "paths": [["choices", "*", "ok"]]},
        {"name": "stops", "kind": "any", "paths": [["choices", "*", "stop_reason"]]},
        {"name": "times", "kind": "timestamp", "paths": [["choices", "*", "created"]]},
        {
            "name": "content",
            "kind": "string",
            "paths": [["choices", "0", "message", "content"], ["choices", "0", "text"]],
        },
    ]
    patterns = {
        "string": r"name: *(\w+)",
        "integer": r"n *= *(-?\d+)",
        "number": r"x *= *([-+0-9.eE]+|NaN|Infinity)",
        "boolean": r"ok *= *(\w+)",
        "json": r"j *= *(\S+)",
    }
    properties: list[dict[str, object]] = []
    for kind in ("string", "integer", "number", "boolean", "json"):
        modes = ("first", "last", "all", "count") if extract else ("first",)
        for mode in modes:
            prop: dict[str, object] = {"name": f"{kind}_{mode}", "kind": kind}
            if mode in ("all",):
                prop = {"name": f"{kind}_{mode}", "kind": "array", "item_kind": kind if kind != "json" else "string"}
            if mode == "count":
                prop["kind"] = "integer"
            if extract:
                prop["extract"] = {"pattern": patterns[kind], "mode": mode}
            properties.append(prop)
    for item in ("string", "integer", "number", "boolean"):
        properties.append({"name": f"items_{item}", "kind": "array", "item_kind": item})
    if extract:  # a pattern without a group (the whole match) and one whose group may take no part
        properties.append({"name": "whole", "kind": "string", "extract": {"pattern": r"\d+", "mode": "last"}})
        properties.append({"name": "optional", "kind": "json", "extract": {"pattern": r"a(b)?c", "mode": "all"}})
    plan: dict[str, object] = {
        "version": 2,
        "explain": explain,
        "created_unit": unit,
        "max_body_bytes": 1 << 20,
        "columns": columns,
        "content": {"column": len(columns) - 1, "text_errors": not extract, "properties": properties},
    }
    if max_column is not None:
        plan["max_column_bytes"] = max_column
    return json.dumps(plan).encode()


documents = [plan_for(load_profile(p)).native.document for p in PROFILES]
# A small plan too, with a tiny size limit: the refusal by size is fuzzed as well; and the profiles' plans
# without "explain" (the fast pass alone).
small = json.loads(plan_for(load_profile("openai"), ["model", "created", "n_choices"]).native.document)
small["max_body_bytes"] = 512
documents.append(json.dumps(small).encode())
for d in list(documents[:4]):
    plain = json.loads(d)
    plain["explain"] = False
    documents.append(json.dumps(plain).encode())
# 13..: every kind and conversion, with x-extract (seconds), as JSON content only (iso, millis), without
# "explain", and with a column limit of 256 bytes (the batch is then read in halves, as the callers do).
documents += [
    kinds_plan("seconds", extract=True),
    kinds_plan("iso", extract=False),
    kinds_plan("millis", extract=True, explain=False),
    kinds_plan("seconds", extract=True, max_column=256),
    kinds_plan("iso", extract=True),
]

if __name__ == "__main__":
    if sys.argv[1:2] == ["--seeds"]:
        folder = Path(sys.argv[2])
        folder.mkdir(parents=True, exist_ok=True)
        for i, d in enumerate(documents):
            (folder / f"plan-{i:02d}").write_bytes(d)
    else:
        print("static const char* const kPlans[] = {")
        for d in documents:
            print("    " + json.dumps(d.decode()) + ",")
        print("};")
