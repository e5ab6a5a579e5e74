"""The native core's C ABI contract is declared once (native/contract.py) and generated for C, Python and Java:
the committed files are what the declaration makes, each side reads its codes from them, and a build from a
stale file stops with one line."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "native" / "contract.py"


def _contract():
    spec = importlib.util.spec_from_file_location("dspark_native_contract_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_files_are_what_the_declaration_makes():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_side_declares_a_code_of_its_own():
    """The codes appear only in the generated files: a hand-written copy elsewhere is what drifted before."""
    contract = _contract()
    sources = {
        ROOT / "native" / "dspark_core.h": r"DSPARK_\w+ = \d+",
        ROOT / "connector" / "parse" / "native.py": r"^(ABI_VERSION|PLAN_VERSION|OK|CONTENT_\w+)\s*=",
        ROOT / "java/src/main/java/io/dspark/vllm/parse/NativeCore.java": r"static final int \w+ = \d+;",
        ROOT / "java/src/main/java/io/dspark/vllm/parse/NativeParser.java": r'case "(string|integer|number)"',
    }
    for path, pattern in sources.items():
        assert not re.search(pattern, path.read_text(), re.M), f"{path.name} declares a code of its own"
    assert contract.ABI_VERSION >= 2


def test_a_stale_generated_file_stops_the_build_with_one_line(tmp_path, monkeypatch):
    contract = _contract()
    stale = tmp_path / "dspark_contract.h"
    stale.write_text(contract.header().replace("DSPARK_INTERNAL = 4", "DSPARK_INTERNAL = 5"))
    monkeypatch.setattr(contract, "HEADER", stale)
    with pytest.raises(SystemExit) as stopped:
        contract.require_current()
    message = str(stopped.value)
    assert "\n" not in message and "python native/contract.py" in message


def test_each_side_reads_the_declared_values():
    from connector.parse import _core_contract, native

    contract = _contract()
    assert native.ABI_VERSION == _core_contract.ABI_VERSION == contract.ABI_VERSION
    assert {name: value for name, value, _ in contract.VERDICTS}["OK"] == native.OK
    assert native.available() is None  # the built core answers the declared ABI version
    header = (ROOT / "native" / "dspark_contract.h").read_text()
    assert f"#define DSPARK_ABI_VERSION {contract.ABI_VERSION}" in header
    java = (ROOT / "java/src/main/java/io/dspark/vllm/parse/CoreContract.java").read_text()
    assert all(f'"{kind}", ' in java for kind, _ in contract.KINDS)


def test_the_depth_limit_is_declared_once():
    """The JSON depth limit (and its reason) is the contract's: the core's C++ files and strict.py read the
    generated constants; no source writes the number or the message of its own."""
    contract = _contract()
    from connector import strict

    assert strict.DEPTH_LIMIT == contract.DEPTH_LIMIT
    assert str(contract.DEPTH_LIMIT) in contract.TOO_DEEP_REASON
    own = re.compile(rf"(?i)depth\w*\s*=\s*{contract.DEPTH_LIMIT}\b|{contract.DEPTH_LIMIT} levels")
    generated = set(contract.generated())
    sources = [*(ROOT / "native").glob("*.cpp"), *(ROOT / "native").glob("*.h"), *(ROOT / "connector").rglob("*.py")]
    for path in sources:
        if path not in generated:
            assert not own.search(path.read_text()), f"{path.relative_to(ROOT)} writes the depth limit of its own"
