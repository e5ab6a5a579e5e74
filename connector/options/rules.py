"""Validation: `Options` (typed access to validated options) and the rules across options, each a small
named function whose message names the keys and the fix; `validate` (a table) and `validate_model` (a model)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from connector.errors import OptionsError
from connector.options.declared import (
    API_KEY,
    API_KEY_ENV,
    API_KEY_FILE,
    ARROW_BATCH_OPTION,
    BUNDLE_SIZE_OPTION,
    BUNDLE_TIME_OPTION,
    ENDPOINT,
    ML_PREDICT_INSTEAD,
    MODE,
    MODEL,
    MODEL_ONLY,
    MODEL_OPTIONS,
    OPTIONS,
    PARSE_BATCH_SIZE,
    PARSE_GPU_DEVICE,
    PROMPTS_COUNT,
    PROMPTS_PATH,
    PROMPTS_RATE,
    PROMPTS_TEMPLATE,
    REPLAY_ONLY,
    REPLAY_PATH,
    REQUEST_CACHE,
    REQUEST_CONCURRENCY,
    REQUEST_CONCURRENCY_MAX,
    REQUEST_CONCURRENCY_MIN,
    REQUEST_ONLY,
    REQUEST_PARAM_OPTIONS,
    REQUEST_QUEUE_SIZE,
    REQUEST_ROUTING,
    REQUEST_ROUTING_KEY_COLUMN,
    REQUEST_STORE,
    REQUEST_TIMEOUT,
    REQUEST_TLS_CA_BUNDLE,
    REQUEST_TLS_CLIENT_CERT,
    REQUEST_TLS_CLIENT_KEY,
    REQUEST_TLS_VERIFY,
    RETRY_DEADLINE,
    _option_of,
    retired,
)
from connector.options.endpoint import OPTION_KEYS, base_urls, checked
from connector.options.types import (
    _FRAMEWORK_KEYS,
    ARROW_BATCH,
    BUNDLE_SIZE,
    CONNECTOR,
    ConfigOption,
    T,
)
from connector.params import REQUEST_PARAMS, check_params


@dataclass(frozen=True)
class Options:
    """Validated options, read through typed accessors: `options.get(MODE)`; defaults filled in."""

    parsed: Mapping[str, Any]
    given: frozenset[str] = field(default_factory=frozenset)
    raw: Mapping[str, str] = field(default_factory=dict, repr=False)

    def get(self, option: ConfigOption[T]) -> T:
        return cast(T, self.parsed[option.key])

    def is_set(self, option: ConfigOption[Any]) -> bool:
        return option.key in self.given

    @property
    def batch_size(self) -> int:
        # Replay: large batches, the parser's fixed costs spread thin. Request mode: a bundle no longer waits for
        # requests (they run on the JVM's async I/O), only for the parse of what has arrived; bundles end by
        # 'python.fn-execution.bundle.time' long before 1000 responses arrive at most rates, and large responses
        # (logprobs) stay bounded in memory.
        configured = self.get(PARSE_BATCH_SIZE)
        if configured:
            return int(configured)
        return 1000 if self.get(MODE) == "request" else 10000

    @property
    def bundle_size(self) -> int:
        configured = self.get(BUNDLE_SIZE_OPTION)
        if configured:
            return configured
        if self.get(MODE) == "request":
            return self.batch_size
        # Replay: PyFlink's operator waits for a bundle's results before it sends more, so a bundle of one batch
        # makes the JVM and Python take turns; five let the JVM read and send while Python parses
        # (docs/benchmarks.md, "The Flink paths"). `bundle.time` (1 s) still ends each bundle.
        return 5 * self.batch_size

    @property
    def bundle_time(self) -> float:
        """Seconds a Python bundle stays open: as set, else 1 s in replay mode and 20 ms in request mode, where a
        response waits in the open bundle before its row goes on (the latency the table adds; docs/flink.md)."""
        if self.is_set(BUNDLE_TIME_OPTION):
            return float(self.get(BUNDLE_TIME_OPTION))
        return 0.02 if self.get(MODE) == "request" else 1.0

    @property
    def queue_size(self) -> int:
        """Prompts the request step holds at once: as set, else 4 x the most requests on the wire, for each replica
        'endpoint' lists (a host name's addresses are not known here: one)."""
        configured = self.get(REQUEST_QUEUE_SIZE)
        endpoint = self.get(ENDPOINT)
        replicas = len(base_urls(endpoint)) if endpoint else 1
        return int(configured) if configured else 4 * self.concurrency[2] * replicas

    @property
    def concurrency(self) -> tuple[int, int, int, bool]:
        """(start, min, max, adaptive) of the requests on the wire per instance."""
        value = self.get(REQUEST_CONCURRENCY)
        if value == "auto":
            high = self.get(REQUEST_CONCURRENCY_MAX)
            low = min(self.get(REQUEST_CONCURRENCY_MIN), high)
            return max(low, min(16, high)), low, high, True
        fixed = int(value)
        return fixed, fixed, fixed, False

    @property
    def arrow_batch_size(self) -> int:
        # Unset, it follows parse.batch-size, but never past the bundle (which caps it anyway).
        return self.get(ARROW_BATCH_OPTION) or min(self.batch_size, self.bundle_size)

    def without_secrets(self) -> dict[str, str]:
        """The options as given, less the secret ones (the API key): for a place that needs none of them."""
        return {k: v for k, v in self.raw.items() if (o := _option_of(k)) is None or not o.secret}

    def public(self) -> dict[str, str]:
        """The options as given, secrets masked: for logs and plans."""
        return {k: ("******" if (o := _option_of(k)) is not None and o.secret else v) for k, v in self.raw.items()}


# ---------------------------------------------------------------- rules across options
Rule = Callable[[Options], None]


def _given(options: Options, *keys: ConfigOption[Any]) -> list[ConfigOption[Any]]:
    return [k for k in keys if options.is_set(k)]


def _named(option: ConfigOption[Any]) -> str:
    return f"'{option.key}'"


def rule_mode_request_needs_endpoint_and_model(o: Options) -> None:
    if o.get(MODE) != "request":
        return
    for option, example in ((ENDPOINT, "'http://127.0.0.1:8000'"), (MODEL, "the served model's name")):
        if not o.is_set(option):
            raise OptionsError(f"Option '{option.key}' is required when 'mode' = 'request'; set it to {example}.")


def rule_one_prompt_source(o: Options) -> None:
    sources = _given(o, PROMPTS_PATH, PROMPTS_RATE)
    if len(sources) > 1:
        quoted = " and ".join(_named(k) for k in sources)
        raise OptionsError(f"Option {quoted} shouldn't be set together; keep one source of prompts.")
    if o.get(MODE) == "request" and not sources:
        raise OptionsError(
            "One of 'prompts.path' or 'prompts.rate' is required when 'mode' = 'request' (prompts from another "
            f"table: {ML_PREDICT_INSTEAD})."
        )


def rule_rate_options_need_rate(o: Options) -> None:
    for option in _given(o, PROMPTS_TEMPLATE, PROMPTS_COUNT):
        if not o.is_set(PROMPTS_RATE):
            raise OptionsError(f"Option '{option.key}' needs 'prompts.rate'; set it or remove '{option.key}'.")


def rule_mode_replay_needs_path(o: Options) -> None:
    if o.get(MODE) == "replay" and not o.is_set(REPLAY_PATH):
        raise OptionsError("Option 'replay.path' is required when 'mode' = 'replay'.")


def rule_options_fit_mode(o: Options) -> None:
    wrong = REQUEST_ONLY if o.get(MODE) == "replay" else REPLAY_ONLY
    other = "request" if o.get(MODE) == "replay" else "replay"
    for option in _given(o, *wrong):
        raise OptionsError(
            f"Option {_named(option)} has no effect when 'mode' = '{o.get(MODE)}'; remove it or set 'mode' = '{other}'."
        )


def rule_one_api_key(o: Options) -> None:
    given = _given(o, API_KEY, API_KEY_ENV, API_KEY_FILE)
    if len(given) > 1:
        quoted = " and ".join(f"'{k.key}'" for k in given)
        raise OptionsError(f"Option {quoted} shouldn't be set together; keep one.")


def rule_endpoint_is_url(o: Options) -> None:
    endpoint = o.get(ENDPOINT)
    if endpoint is not None:
        checked(endpoint, "Option 'endpoint'", OPTION_KEYS)


def rule_gpu_device(o: Options) -> None:
    device = str(o.get(PARSE_GPU_DEVICE))
    if device != "auto" and not (device.isascii() and device.isdigit()):
        raise OptionsError(f"Option 'parse.gpu-device' must be 'auto' or a device number, got '{device}'.")


def rule_concurrency_bounds(o: Options) -> None:
    if o.get(REQUEST_CONCURRENCY) != "auto":
        for option in _given(o, REQUEST_CONCURRENCY_MIN, REQUEST_CONCURRENCY_MAX):
            raise OptionsError(
                f"Option '{option.key}' needs 'request.concurrency' = 'auto'; set it or remove '{option.key}'."
            )
    elif o.get(REQUEST_CONCURRENCY_MIN) > o.get(REQUEST_CONCURRENCY_MAX):
        raise OptionsError(
            f"Option 'request.concurrency.min' ({o.get(REQUEST_CONCURRENCY_MIN)}) is larger than "
            f"'request.concurrency.max' ({o.get(REQUEST_CONCURRENCY_MAX)}); lower the one or raise the other."
        )


def rule_queue_holds_the_requests_on_the_wire(o: Options) -> None:
    if o.get(MODE) != "request":
        return
    _, _, most, _ = o.concurrency
    if o.queue_size < most:
        key = "request.concurrency.max" if o.get(REQUEST_CONCURRENCY) == "auto" else "request.concurrency"
        raise OptionsError(
            f"Option 'request.queue-size' ({o.get(REQUEST_QUEUE_SIZE)}) is smaller than '{key}' ({most}), the "
            f"requests on the wire it must hold; raise 'request.queue-size' or lower '{key}'."
        )


def rule_request_params_are_valid(o: Options) -> None:
    for name, option in REQUEST_PARAM_OPTIONS.items():
        value = o.get(option)
        if value is not None:
            try:
                check_params({name: value})
            except OptionsError:
                rule = REQUEST_PARAMS[name].rule
                raise OptionsError(f"Option '{option.key}' must be {rule}, got '{o.raw[option.key]}'.") from None


def rule_attempt_fits_deadline(o: Options) -> None:
    if o.get(MODE) == "request" and o.get(REQUEST_TIMEOUT) > o.get(RETRY_DEADLINE):
        raise OptionsError(
            "Option 'request.timeout' is longer than 'request.retry.deadline', which ends every request: lower "
            "'request.timeout' or raise 'request.retry.deadline'."
        )


def rule_tls_files(o: Options) -> None:
    if o.is_set(REQUEST_TLS_CA_BUNDLE) and not o.get(REQUEST_TLS_VERIFY):
        raise OptionsError(
            "Option 'request.tls-ca-bundle' has no effect with 'request.tls-verify' = 'false'; remove one of them."
        )
    if o.is_set(REQUEST_TLS_CLIENT_KEY) and not o.is_set(REQUEST_TLS_CLIENT_CERT):
        raise OptionsError("Option 'request.tls-client-key' needs 'request.tls-client-cert'; set it or remove the key.")


def rule_cache_needs_store(o: Options) -> None:
    if o.is_set(REQUEST_CACHE) and not o.is_set(REQUEST_STORE):
        raise OptionsError(
            "Option 'request.cache' answers from the responses kept in 'request.store'; set 'request.store' to a "
            "folder (e.g. 'file:///data/responses') or remove 'request.cache'."
        )


def rule_key_column_is_a_models(o: Options) -> None:
    if o.is_set(REQUEST_ROUTING_KEY_COLUMN):
        raise OptionsError(
            "Option 'request.routing.key-column' names an INPUT column of a model (ML_PREDICT); a 'dspark-vllm' "
            "table has none: remove it ('request.routing' = 'prefix' routes the table's prompts by their head)."
        )


def rule_key_column_needs_prefix_routing(o: Options) -> None:
    if o.is_set(REQUEST_ROUTING_KEY_COLUMN) and o.get(REQUEST_ROUTING) != "prefix":
        raise OptionsError(
            "Option 'request.routing.key-column' chooses a row's replica by a column's value, which is prefix "
            "routing: add 'request.routing' = 'prefix'."
        )


def rule_arrow_batch_within_bundle(o: Options) -> None:
    batch = o.get(ARROW_BATCH_OPTION)
    if batch is not None and batch > o.bundle_size:
        raise OptionsError(
            f"Option '{ARROW_BATCH}' ({batch}) is larger than '{BUNDLE_SIZE}' ({o.bundle_size}), which caps it; "
            f"raise '{BUNDLE_SIZE}' or lower '{ARROW_BATCH}'."
        )


RULES: tuple[Rule, ...] = (
    rule_mode_request_needs_endpoint_and_model,
    rule_mode_replay_needs_path,
    rule_one_prompt_source,
    rule_rate_options_need_rate,
    rule_options_fit_mode,
    rule_one_api_key,
    rule_endpoint_is_url,
    rule_gpu_device,
    rule_concurrency_bounds,
    rule_queue_holds_the_requests_on_the_wire,
    rule_request_params_are_valid,
    rule_attempt_fits_deadline,
    rule_tls_files,
    rule_arrow_batch_within_bundle,
    rule_cache_needs_store,
    rule_key_column_is_a_models,
)


def _answer_setting(key: str) -> bool:
    """'answer.<field>.<setting>': a per-field setting of the answer, checked against the declared fields where
    they are known (connector.types.answer.answer_options)."""
    return key.startswith("answer.") and key.count(".") >= 2


def _unsupported(what: str, unknown: list[str], supported: list[str], where: str) -> OptionsError:
    """Flink's wording, but the nearest keys to each unknown one instead of all of them (a misspelt key is the
    usual cause, and the list of ~60 hid the one meant)."""
    named = []
    for key in unknown:
        near = difflib.get_close_matches(key, supported, n=3, cutoff=0.6)
        named.append(f"{key} (did you mean {' or '.join(near)}?)" if near else key)
    return OptionsError(
        f"Unsupported options found for {what}.\n\n"
        "Unsupported options:\n\n" + "\n".join(named) + "\n\n"
        f"Supported options: {len(supported)} keys, in {where}."
    )


def validate(raw: Mapping[str, str]) -> Options:
    """Check a table's WITH options the way Flink's FactoryUtil does, then the rules across options."""
    for key in sorted(raw):
        if (message := retired(key)) is not None:
            raise OptionsError(message)
    unknown = sorted(k for k in raw if _option_of(k) is None and k not in _FRAMEWORK_KEYS and not _answer_setting(k))
    if unknown:
        supported = sorted({*(o.key for o in OPTIONS), *_FRAMEWORK_KEYS})
        raise _unsupported(
            f"'{CONNECTOR}'", unknown, supported, "the README's table of options (connector.options.OPTIONS)"
        )
    missing = sorted(o.key for o in OPTIONS if o.required and o.key not in raw)
    if missing:
        raise OptionsError(
            "One or more required options are missing.\n\nMissing required options are:\n\n" + "\n".join(missing)
        )
    if raw["connector"] != CONNECTOR:
        raise OptionsError(f"Option 'connector' must be '{CONNECTOR}', got '{raw['connector']}'.")
    values = {o.key: (o.parse(raw[o.key]) if o.key in raw else o.default) for o in OPTIONS}
    options = Options(parsed=values, given=frozenset(raw), raw=dict(raw))
    for rule in RULES:
        rule(options)
    return options


# The rules across options that hold for a model too (a model has no prompt source, replay or Python operator).
MODEL_RULES: tuple[Rule, ...] = (
    rule_mode_request_needs_endpoint_and_model,
    rule_one_api_key,
    rule_endpoint_is_url,
    rule_concurrency_bounds,
    rule_request_params_are_valid,
    rule_attempt_fits_deadline,
    rule_tls_files,
    rule_cache_needs_store,
    rule_key_column_needs_prefix_routing,
)


def validate_model(raw: Mapping[str, str]) -> Options:
    """Check a model's WITH options (`CREATE MODEL ... WITH ('provider' = 'dspark-vllm', ...)`) as `validate` checks
    a table's: the same keys and defaults for what they share, Flink's wording for unknown keys."""
    known = {o.key: o for o in MODEL_OPTIONS}
    unknown = sorted(k for k in raw if k not in known and not _answer_setting(k))
    if unknown:
        raise _unsupported(
            f"model provider '{CONNECTOR}'",
            unknown,
            sorted(known),
            "docs/flink.md's table of model options (connector.options.MODEL_OPTIONS)",
        )
    if raw.get("provider") != CONNECTOR:
        raise OptionsError(f"Option 'provider' must be '{CONNECTOR}', got '{raw.get('provider')}'.")
    values = {o.key: o.default for o in (*OPTIONS, *MODEL_ONLY)}
    values.update({k: known[k].parse(v) for k, v in raw.items() if k in known})
    options = Options(parsed=values, given=frozenset(raw), raw=dict(raw))
    for rule in MODEL_RULES:
        rule(options)
    return options
