"""The plan of a batch: what `parse_batch` and its backends read for a profile and a choice of columns.

Below both `connector.parse.batch` (which makes a plan per call) and `connector.parse.backends` (which read by
it), so neither imports the other.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from connector.parse.native import NativePlan
from connector.profiles import ContentProperty, Profile
from connector.types.columns import Column, body_columns, output_schema, read_schema

__all__ = ["Plan", "plan_for"]


@dataclass(frozen=True)
class Plan:
    """What a batch reads for a profile and a choice of columns (built once per pair; see `plan_for`)."""

    names: tuple[str, ...]  # the output columns after `line`, in the order asked
    columns: tuple[Column, ...]  # the body columns read: those asked, and `content` when a content column is
    properties: tuple[ContentProperty, ...]  # every content property, when a content column is asked
    content_column: str | None
    created_unit: str
    output_schema: pa.Schema
    native: NativePlan
    # The gpu backend's read schemas. For fields that are an integer or a string (stop_reason): the schema
    # that reads them as integers, the reader's words when a batch holds such integers, and a byte pattern
    # that finds the bodies that do.
    read_schema: pa.Schema
    int_read_schema: pa.Schema
    int_markers: tuple[str, ...]
    int_probe: re.Pattern[bytes] | None


_plans: dict[tuple[int, tuple[str, ...] | None], tuple[Profile, Plan]] = {}


def plan_for(profile: Profile, columns: Sequence[str] | None = None) -> Plan:
    """The plan of `profile` for the output `columns` (all of the profile's when None)."""
    key = (id(profile), None if columns is None else tuple(columns))
    cached = _plans.get(key)
    if cached is not None and cached[0] is profile:
        return cached[1]
    every = body_columns(profile)
    full = output_schema(profile)
    available = full.names[1:]
    names = tuple(available) if columns is None else tuple(columns)
    unknown = [n for n in names if n not in available or n == "line"]
    if unknown:
        near = difflib.get_close_matches(unknown[0], available, n=3)
        hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
        raise ValueError(
            f"unknown column {unknown[0]!r} in profile {profile.name!r}{hint} (its columns: {', '.join(available)})"
        )
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"columns {twice}: give each once")
    content_names = {p.name for p in profile.content_properties} | {"content_error"}
    wants_content = bool(profile.content_properties) and any(n in content_names for n in names)
    read = tuple(c for c in every if c.name in names or (wants_content and c.name == "content"))
    properties = tuple(profile.content_properties) if wants_content else ()
    mixed = sorted({p[-1] for c in read if c.kind == "any" for p in c.paths})
    plan = Plan(
        names=names,
        columns=read,
        properties=properties,
        content_column="content" if wants_content else None,
        created_unit=profile.created_unit,
        output_schema=pa.schema([full.field("line"), *(full.field(n) for n in names)]),
        native=NativePlan.of(read, profile.created_unit, properties),
        read_schema=read_schema(read, profile.created_unit),
        int_read_schema=read_schema(read, profile.created_unit, mixed_as=pa.int64()),
        int_markers=tuple(f"/{name}) changed from string to number" for name in mixed),
        int_probe=re.compile(rb'"(?:%s)"\s*:\s*-?\d' % b"|".join(re.escape(n.encode()) for n in mixed))
        if mixed
        else None,
    )
    if len(_plans) > 64:
        _plans.clear()
    _plans[key] = (profile, plan)
    return plan
