"""Request body parameters a user sets once for every request (vLLM's names), checked before anything is sent.

    >>> from connector.params import body_defaults, check_params
    >>> check_params({"temperature": 0.2, "n": 2, "logprobs": 3})
    >>> body_defaults({"temperature": 0.2, "logprobs": 3}, chat=True)
    {'temperature': 0.2, 'top_logprobs': 3, 'logprobs': True}

A payload's own value of a parameter wins over the default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connector.errors import OptionsError

__all__ = ["REQUEST_PARAMS", "RequestParam", "body_defaults", "check_params"]


@dataclass(frozen=True)
class RequestParam:
    """A body parameter and what a valid value of it is: bounds, as data, so that the JVM holds a model's per-row
    values (an INPUT column named like it) to the same rule (`as_rule`, in the model's plan)."""

    type: str  # "int", "float", "bool" or "list[str]": what a table option of this parameter holds
    rule: str  # what a valid value is, for messages
    description: str
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False  # the minimum itself is not valid
    below: bool = False  # the maximum itself is not valid

    def valid(self, v: Any) -> bool:
        if self.type == "list[str]":
            return isinstance(v, list | tuple) and all(isinstance(s, str) and s for s in v)
        if isinstance(v, bool) or not isinstance(v, int | float):
            return False
        if self.type == "int" and not isinstance(v, int):
            return False
        if isinstance(v, float) and not math.isfinite(v):  # NaN and infinities are no JSON numbers
            return False
        if self.minimum is not None and (v <= self.minimum if self.above else v < self.minimum):
            return False
        return self.maximum is None or not (v >= self.maximum if self.below else v > self.maximum)

    def as_rule(self) -> dict[str, Any]:
        """The rule as the model's plan carries it (`io.dspark.vllm.engine.ModelPredictFunction`)."""
        return {
            "type": self.type, "rule": self.rule, "min": self.minimum, "max": self.maximum,
            "above": self.above, "below": self.below,
        }  # fmt: skip


REQUEST_PARAMS: Mapping[str, RequestParam] = {
    "n": RequestParam("int", "an integer >= 1", "Choices generated per request.", 1),
    "max_tokens": RequestParam("int", "an integer >= 1", "Most tokens generated per choice.", 1),
    "min_tokens": RequestParam("int", "an integer >= 0", "Fewest tokens generated before a stop may end a choice.", 0),
    "temperature": RequestParam("float", "a number >= 0", "Sampling temperature; 0 is greedy.", 0),
    "top_p": RequestParam(
        "float",
        "a number in (0, 1]",
        "Nucleus sampling: the smallest set of tokens with this much probability.",
        0,
        1,
        above=True,
    ),  # fmt: skip
    "top_k": RequestParam(
        "int", "-1, 0 or an integer >= 1", "Sample from the k most likely tokens; -1 or 0 means all.", -1
    ),
    "min_p": RequestParam(
        "float", "a number in [0, 1]", "Least probability of a token, relative to the most likely one.", 0, 1
    ),
    "presence_penalty": RequestParam("float", "a number in [-2, 2]", "Penalty on tokens that already appeared.", -2, 2),
    "frequency_penalty": RequestParam(
        "float", "a number in [-2, 2]", "Penalty growing with how often a token appeared.", -2, 2
    ),
    "repetition_penalty": RequestParam(
        "float", "a number > 0", "Multiplicative penalty on repeated tokens (1 = none).", 0, above=True
    ),
    "seed": RequestParam("int", "an integer", "Random seed of the sampler, for repeatable outputs."),
    "stop": RequestParam("list[str]", "a list of non-empty strings", "Strings that end a choice when generated."),
    "logprobs": RequestParam(
        "int",
        "an integer in [0, 20]",
        "Log probabilities of the k most likely tokens at each position (0: the chosen token's only); chat "
        "requests get logprobs=true and top_logprobs=k, completions logprobs=k.",
        0,
        20,
    ),
}


def check_params(params: Mapping[str, Any]) -> None:
    """Raise OptionsError naming the first unknown parameter or invalid value, and the fix."""
    for name, value in params.items():
        param = REQUEST_PARAMS.get(name)
        if param is None:
            raise OptionsError(
                f"unknown request parameter {name!r}: use one of {', '.join(REQUEST_PARAMS)} (vLLM's names), or "
                "put it in the payload itself"
            )
        if not param.valid(value):
            raise OptionsError(f"request parameter {name!r} must be {param.rule}, got {value!r}")


def body_defaults(params: Mapping[str, Any], *, chat: bool) -> dict[str, Any]:
    """The checked `params` as body fields of a chat or a completions request."""
    body = {name: list(value) if name == "stop" else value for name, value in params.items()}
    if chat and "logprobs" in body:
        body["top_logprobs"] = body.pop("logprobs")
        body["logprobs"] = True
    return body
