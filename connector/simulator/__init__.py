"""A vLLM-compatible simulator: bodies (`responses`), answers to a schema (`answers`), the server (`server`), test
helpers (`testing`)."""

from __future__ import annotations

from connector.simulator.responses import make_body, make_corpus
from connector.simulator.server import FAULT_KINDS, Simulator, SimulatorConfig
from connector.simulator.testing import RunningSimulator, serve_simulator

__all__ = [
    "FAULT_KINDS",
    "RunningSimulator",
    "Simulator",
    "SimulatorConfig",
    "make_body",
    "make_corpus",
    "serve_simulator",
]
