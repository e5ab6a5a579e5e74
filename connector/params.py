"""Request body parameters a user sets once for every request (vLLM's names), checked before anything is sent.

    >>> from connector.params import body_defaults, check_params
    >>> check_params({"temperature": 0.2, "n": 2, "logprobs": 3})
    >>> body_defaults({"temperature": 0.2, "logprobs": 3}, chat=True)
    {'temperature': 0.2, 'top_logprobs': 3, 'logprobs': True}

A payload's own value of a parameter wins over the default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from connector.errors import OptionsError

__all__ = ["REQUEST_PARAMS", "RequestParam", "body_defaults", "check_params"]


@dataclass(frozen=True)
class RequestParam:
    type: str  # "int", "float", "bool" or "list[str]": what a table option of this parameter holds
    rule: str  # what a valid value is, for messages
    description: str
    valid: Callable[[Any], bool]


def _int(test: Callable[[int], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and test(v)


def _float(test: Callable[[float], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v == v and test(float(v))


def _strings(v: Any) -> bool:
    return isinstance(v, list | tuple) and all(isinstance(s, str) and s for s in v)


REQUEST_PARAMS: Mapping[str, RequestParam] = {
    "n": RequestParam("int", "an integer >= 1", "Choices generated per request.", _int(lambda v: v >= 1)),
    "max_tokens": RequestParam("int", "an integer >= 1", "Most tokens generated per choice.", _int(lambda v: v >= 1)),
    "min_tokens": RequestParam(
        "int", "an integer >= 0", "Fewest tokens generated before a stop may end a choice.", _int(lambda v: v >= 0)
    ),
    "temperature": RequestParam(
        "float", "a number >= 0", "Sampling temperature; 0 is greedy.", _float(lambda v: v >= 0)
    ),
    "top_p": RequestParam(
        "float",
        "a number in (0, 1]",
        "Nucleus sampling: the smallest set of tokens with this much probability.",
        _float(lambda v: 0 < v <= 1),
    ),
    "top_k": RequestParam(
        "int",
        "-1, 0 or an integer >= 1",
        "Sample from the k most likely tokens; -1 or 0 means all.",
        _int(lambda v: v >= -1),
    ),
    "min_p": RequestParam(
        "float",
        "a number in [0, 1]",
        "Least probability of a token, relative to the most likely one.",
        _float(lambda v: 0 <= v <= 1),
    ),
    "presence_penalty": RequestParam(
        "float", "a number in [-2, 2]", "Penalty on tokens that already appeared.", _float(lambda v: -2 <= v <= 2)
    ),
    "frequency_penalty": RequestParam(
        "float",
        "a number in [-2, 2]",
        "Penalty growing with how often a token appeared.",
        _float(lambda v: -2 <= v <= 2),
    ),
    "repetition_penalty": RequestParam(
        "float", "a number > 0", "Multiplicative penalty on repeated tokens (1 = none).", _float(lambda v: v > 0)
    ),
    "seed": RequestParam("int", "an integer", "Random seed of the sampler, for repeatable outputs.", _int(bool)),
    "stop": RequestParam(
        "list[str]", "a list of non-empty strings", "Strings that end a choice when generated.", _strings
    ),
    "logprobs": RequestParam(
        "int",
        "an integer in [0, 20]",
        "Log probabilities of the k most likely tokens at each position (0: the chosen token's only); chat "
        "requests get logprobs=true and top_logprobs=k, completions logprobs=k.",
        _int(lambda v: 0 <= v <= 20),
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
