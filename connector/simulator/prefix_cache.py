"""The simulator's prefix cache: what vLLM's automatic prefix caching does to a prompt, in the simulator's tokens.

vLLM keeps the KV cache of a prompt in blocks of `block_size` tokens, each named by a hash of its tokens and of
the block before it; a new prompt whose first blocks are cached computes only the rest (its time to first token
is shorter), and the least recently used blocks are freed when the cache is full. vLLM counts, in tokens, the
prompt tokens it looked up (`vllm:prefix_cache_queries_total`) and those found (`vllm:prefix_cache_hits_total`);
the simulator counts the same on its /metrics.

Here a prompt's tokens are its text as a chat template lays it out (`<|role|>` before each message's content)
cut in pieces of `CHARS_PER_TOKEN` characters, as the simulator counts tokens elsewhere; a block is cached whole
or not at all, and the last token of a prompt is never a hit (vLLM always computes one). A prompt's blocks become
the most recently used tail first, so that a full cache loses a prompt's tail before its head (vLLM frees a
request's blocks in reverse order for the same reason). Pure code.

    >>> cache = PrefixCache(capacity_tokens=64, block_size=4)
    >>> cache.lookup({"prompt": "a" * 40})  # 10 tokens, nothing cached yet
    0
    >>> cache.lookup({"prompt": "a" * 40 + "b" * 8})  # the same 10 first tokens: 2 whole blocks of 4 are hits
    8
    >>> cache.queries, cache.hits
    (22, 8)
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from connector.simulator.responses import CHARS_PER_TOKEN

__all__ = ["PrefixCache", "prompt_text"]


def prompt_text(request: Mapping[str, Any]) -> str:
    """The prompt as the model sees it: chat messages laid out by a template, or the completion's prompt."""
    if "messages" in request:
        parts = []
        for m in request.get("messages") or ():
            if not isinstance(m, Mapping):
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            parts.append(f"<|{m.get('role', '')}|>{content or ''}")
        return "".join(parts) + "<|assistant|>"
    prompt = request.get("prompt", "")
    return prompt if isinstance(prompt, str) else " ".join(str(p) for p in prompt)


class PrefixCache:
    """Blocks of `block_size` tokens, at most `capacity_tokens` of them together, least recently used freed first."""

    def __init__(self, capacity_tokens: int, block_size: int = 16) -> None:
        if capacity_tokens < 0 or block_size < 1:
            raise ValueError("the prefix cache needs capacity_tokens >= 0 and block_size >= 1")
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.queries = 0  # prompt tokens looked up
        self.hits = 0  # prompt tokens found

    def lookup(self, request: Mapping[str, Any]) -> int:
        """The prompt tokens of `request` found in the cache (counted), its blocks then cached as the most recent."""
        text = prompt_text(request)
        tokens = max(1, -(-len(text) // CHARS_PER_TOKEN))
        self.queries += tokens
        chars = self.block_size * CHARS_PER_TOKEN
        full = tokens // self.block_size  # whole blocks; a last, partial block is never cached
        parent = b""
        hit_blocks = 0
        missing = False
        names = []
        for i in range(full):
            parent = hashlib.blake2b(parent + text[i * chars : (i + 1) * chars].encode(), digest_size=16).digest()
            names.append(parent)
            if not missing and parent in self._blocks:
                hit_blocks += 1
            else:
                missing = True
        hit = min(hit_blocks * self.block_size, tokens - 1)
        self.hits += hit
        # The tail first, the head last (most recent): as vLLM frees a request's blocks in reverse order, a full
        # cache gives up a prompt's tail before its head, which every later prompt of that head needs first.
        for name in reversed(names):
            self._blocks[name] = None
            self._blocks.move_to_end(name)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
        return hit

    def metrics(self, models: list[str]) -> list[str]:
        """vLLM's two counters in Prometheus text, one series per served model (the simulator's cache is shared)."""
        lines = [
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
            "# TYPE vllm:prefix_cache_queries_total counter",
        ]
        lines += [f'vllm:prefix_cache_queries_total{{model_name="{m}"}} {self.queries}' for m in models]
        lines += [
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
            "# TYPE vllm:prefix_cache_hits_total counter",
        ]
        lines += [f'vllm:prefix_cache_hits_total{{model_name="{m}"}} {self.hits}' for m in models]
        return lines
