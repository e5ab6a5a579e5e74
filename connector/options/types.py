"""The options' type system: `ConfigOption` (key, type, default, description, group), the parsers of
durations and sizes, and `_option`, which the declarations use."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from connector.errors import OptionsError

CONNECTOR = "dspark-vllm"
# Option keys the factory always accepts (Flink adds these two to every factory's list).
_FRAMEWORK_KEYS = ("connector", "property-version")


T = TypeVar("T")


@dataclass(frozen=True)
class ConfigOption(Generic[T]):
    """One option: its key, type, default and the sentence the docs show. Read it with `Options.get`."""

    key: str
    type: str  # string | int | double | boolean | duration | memory | list | enum | concurrency (an int or 'auto')
    description: str
    default: T | None = None
    required: bool = False
    values: tuple[str, ...] = ()  # for enums
    minimum: float | None = None
    maximum: float | None = None
    group: str = "General"
    secret: bool = False

    def parse(self, raw: str) -> T:
        text = str(raw).strip()
        try:
            if self.type == "int":
                value: Any = _integer(text)
            elif self.type == "concurrency":
                value = "auto" if text.lower() == "auto" else _integer(text)
            elif self.type == "double":
                if not _DECIMAL.match(text):
                    raise ValueError(text)
                value = float(text)
                if not math.isfinite(value):
                    raise ValueError(text)
            elif self.type == "boolean":
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                value = text.lower() == "true"
            elif self.type == "duration":
                value = parse_duration(text)
            elif self.type == "memory":
                value = parse_memory(text)
            elif self.type == "list":
                value = [item for item in str(raw).split(";") if item]
            elif self.type == "enum":
                if text.lower() not in self.values:
                    raise ValueError(text)
                value = text.lower()
            else:
                value = str(raw)
        except ValueError:
            raise OptionsError(
                f"Could not parse value '{raw}' for key '{self.key}'.\n\nExpected {self.expected}."
            ) from None
        if self.minimum is not None and not isinstance(value, str) and value < self.minimum:
            raise OptionsError(f"Option '{self.key}' must be >= {_fmt(self.minimum)}, got '{raw}'.")
        if self.maximum is not None and not isinstance(value, str) and value > self.maximum:
            limit = _fmt_duration(self.maximum) if self.type == "duration" else _fmt(self.maximum)
            raise OptionsError(f"Option '{self.key}' must be <= {limit}, got '{raw}'.")
        return cast(T, value)

    @property
    def expected(self) -> str:
        if self.type == "enum":
            return "one of " + ", ".join(f"'{v}'" for v in self.values)
        if self.type == "duration":
            return "a duration such as '30 s', '500 ms' or '2 min'"
        if self.type == "memory":
            return "a memory size such as '32 mb', '512 kb' or '1 gb'"
        if self.type == "concurrency":
            return "an integer or 'auto'"
        return {"int": "an integer", "double": "a number", "boolean": "'true' or 'false'"}.get(self.type, "text")

    @property
    def default_text(self) -> str:
        if self.default is None:
            return "(none)"
        if self.type == "duration":
            return _fmt_duration(float(cast(float, self.default)))
        if self.type == "memory":
            return _fmt_memory(int(cast(int, self.default)))
        if self.type == "boolean":
            return str(self.default).lower()
        return _fmt(self.default)


# Bounds the jar can hold: a Java long (every number's default maximum, `_option`), a Java int (the async
# operator's capacity, batch sizes).
_MAX_LONG = 2**63 - 1
_MAX_INT = 2**31 - 1


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_UNITS = {
    "ns": 1e-9, "nano": 1e-9, "nanos": 1e-9, "nanosecond": 1e-9, "nanoseconds": 1e-9,
    "us": 1e-6, "µs": 1e-6, "micro": 1e-6, "micros": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
    "ms": 1e-3, "milli": 1e-3, "millis": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "m": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}  # fmt: skip
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zµ]*)\s*$", re.IGNORECASE)
# Numbers as Flink and Java read them: ASCII digits only (Python's int() and float() also take '1_0' and the
# digits of other scripts, which then meant something else, or nothing, on the JVM side).
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_DECIMAL = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")


def _integer(text: str) -> int:
    if not _INTEGER.match(text):
        raise ValueError(text)
    return int(text)


def parse_duration(text: str) -> float:
    """Flink's duration syntax ("30 s", "500ms", "2 min"; a bare number is milliseconds) -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(text)
    number, unit = match.groups()
    if not unit:
        return float(number) / 1000.0
    if unit.lower() not in _UNITS:
        raise ValueError(text)
    return float(number) * _UNITS[unit.lower()]


_MEMORY = re.compile(r"^\s*([0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)
_MEMORY_UNITS = {
    "": 1, "b": 1, "bytes": 1,
    "k": 1024, "kb": 1024, "kibibytes": 1024,
    "m": 1024**2, "mb": 1024**2, "mebibytes": 1024**2,
    "g": 1024**3, "gb": 1024**3, "gibibytes": 1024**3,
}  # fmt: skip


def parse_memory(text: str) -> int:
    """Flink's memory size syntax ("32 mb", "512kb", "1 g"; units of 1024) -> bytes."""
    match = _MEMORY.match(text)
    if not match or match.group(2).lower() not in _MEMORY_UNITS:
        raise ValueError(text)
    return int(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()]


def _fmt_memory(size: int) -> str:
    for unit, factor in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} b"


def _fmt_duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)} {unit}"
    return f"{seconds} s"


# The most any duration may be: the JVM counts time in nanoseconds from an arbitrary origin (2^63 ns is 292
# years), and a longer deadline or wait overflowed there (every request failed at once).
DURATION_MAX_S = 365 * 86400.0


def _option(key: str, type_: str, description: str, **kwargs: Any) -> ConfigOption[Any]:
    """An option; a number or a duration not given a maximum gets what the jar can hold."""
    if type_ == "duration":
        kwargs.setdefault("maximum", DURATION_MAX_S)
    elif type_ in ("int", "concurrency"):
        kwargs.setdefault("maximum", _MAX_LONG)  # the jar reads numbers as Java longs: a larger one would wrap
    return ConfigOption(key=key, type=type_, description=description, **kwargs)


# Flink settings our Python functions depend on: set on this table's own operators (never the user's job).
BUNDLE_SIZE = "python.fn-execution.bundle.size"
BUNDLE_TIME = "python.fn-execution.bundle.time"
ARROW_BATCH = "python.fn-execution.arrow.batch.size"
