"""The package's build backend: setuptools, after compiling the Flink connector jar (java/build_jar.py) and
the native parser core (native/build_native.py, with a C++ compiler and simdjson from the pysimdjson wheel)."""

from __future__ import annotations

from typing import Any

import build_jar
import build_native
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the PEP 517 hooks not overridden here)


def _compile(only_this_cpu: bool = False) -> None:
    build_native.build(only_this_cpu=only_this_cpu)  # first: the jar carries the core
    build_jar.build()


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    _compile()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    # The checkout runs here: the core for this machine's CPU only (a wheel carries every variant).
    _compile(only_this_cpu=True)
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
