"""The Java side's tests from pytest: java/build_jar.py loaded as a module (its `java_tests` compiles the jar's
sources and java/src/test against PyFlink's jars and runs a main class of the tests)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDS_JDK = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK")


def build_script(path: Path) -> ModuleType:
    """A build script of the checkout (java/build_jar.py, native/build_native.py) loaded as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass of the script looks its module up there
    spec.loader.exec_module(module)
    return module


def build_jar() -> ModuleType:
    return build_script(ROOT / "java" / "build_jar.py")
