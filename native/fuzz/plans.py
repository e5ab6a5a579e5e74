"""Writes the fuzz target's plans (a C header) from the project's own profiles, as connector/decode/native.py
writes them (with "explain"; some also without): python native/fuzz/plans.py > native/fuzz/build/plans.h"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from connector.decode.batch import plan_for  # noqa: E402
from connector.profiles import load_profile  # noqa: E402

TEST_PROFILES = ("gateway_iso.yaml", "gateway_ms.yaml", "risk.yaml", "flat.yaml")
PROFILES = ["openai", "coder", "vl", "math", *(str(ROOT / "tests/data/profiles" / f) for f in TEST_PROFILES)]

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
print("static const char* const kPlans[] = {")
for d in documents:
    print("    " + json.dumps(d.decode()) + ",")
print("};")
