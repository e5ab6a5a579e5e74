"""Seeded mutation fuzzing of real vLLM bodies: whatever the bytes, every body is one row or one error row,
every backend gives the same rows and reasons, and they are what the exact path gives (`reference`)."""

from __future__ import annotations

import random

import pytest

from connector.parse import parse_batch
from connector.simulator.responses import make_corpus
from tests.decode_support import PROFILES, assert_matches_reference, mutate


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["coder", "vl", "math", str(PROFILES / "flat.yaml")])
def test_mutated_bodies(backend: str, profile: str):
    rng = random.Random(f"issue-12 {profile}")
    corpus = make_corpus(300, profile if profile in ("coder", "vl", "math") else "openai", seed=12, json_share=0.6)
    for round_ in range(10):
        bodies = [mutate(b, rng) if rng.random() < 0.7 else b for b in corpus]
        rng.shuffle(bodies)
        result = assert_matches_reference(bodies, profile, backend)  # also: rows + errors == bodies, each once
        assert result.table.num_rows + result.errors.num_rows == len(bodies), round_
        if backend != "cpu":
            cpu = parse_batch(bodies, profile, "cpu")
            assert result.table.equals(cpu.table) and result.errors.equals(cpu.errors), round_
