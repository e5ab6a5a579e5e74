"""Seeded mutation fuzzing of real vLLM bodies: whatever the bytes, every body is one row or one error row,
every backend gives the same rows and reasons, and they are what the exact path gives (`reference`)."""

from __future__ import annotations

import random

import pytest

from connector.decode import parse_batch
from connector.simulator.responses import make_corpus
from tests.test_decode import PROFILES, assert_matches_reference

# Things hostile or broken servers and models send, spliced in at random places.
TOKENS = [
    b"NaN",
    b"-Infinity",
    b"Inf",
    b"1e400",
    b"9" * 400,
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\x00",
    b"\x0c",
    b"\xc2\xa0",
    b"\xef\xbb\xbf",
    b"[" * 70,
    b"]" * 70,
    b"{}",
    b"}",
    b"]",
    b",",
    b":",
    b'"',
    b"\\",
    b"\n",
    b"\r\n",
    b"true",
    b"nul",
    b"-",
    b"0.",
    b"1e",
    b'{"error":{"message":"x"}}',
    b'"object":"error",',
    b'"created":"now",',
    b'"choices":{},',
    b"```json\n",
]


def mutate(body: bytes, rng: random.Random) -> bytes:
    data = bytearray(body)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        at = rng.randrange(len(data) + 1)
        kind = rng.randrange(6)
        if kind == 0 and data:  # flip a byte
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:  # delete a span
            del data[at : at + rng.randrange(1, 12)]
        elif kind == 2:  # insert a token
            data[at:at] = rng.choice(TOKENS)
        elif kind == 3:  # truncate (a cut connection)
            del data[at:]
        elif kind == 4:  # duplicate a span
            start = rng.randrange(len(data) + 1)
            data[at:at] = data[start : start + rng.randrange(1, 40)]
        else:  # replace a printable ASCII byte with another structural one
            if data:
                data[min(at, len(data) - 1)] = rng.choice(b'{}[]",:\\ 0-e')
    return bytes(data)


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
