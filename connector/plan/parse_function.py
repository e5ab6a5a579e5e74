"""The plan of a table's Python parse function, as it travels to the workers: JSON
(`ParseFunctionPlan.document()`), made by `connector.plan` on the client and rebuilt by `connector.flink.runtime`
on a worker (which has neither the client's profile files nor its secrets). Java's `TablePlan` is the whole plan
of a table; this is the part of it the Python parse function (`'parse.backend' = 'gpu'`) is built from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connector.options import Options, validate
from connector.profiles import Profile, profile_of_document

__all__ = ["ParseFunctionPlan"]


@dataclass(frozen=True)
class ParseFunctionPlan:
    """What the Python parse function of one table is built from on the workers; it travels in the plan as
    JSON (`document`, `of_document`)."""

    table: str
    options: Options
    profile: Profile
    require_created: bool

    def document(self) -> dict[str, Any]:
        return {
            "table": self.table,
            # The parse step needs no secret: the API key stays in the request step's spec (on the JVM).
            "options": self.options.without_secrets(),
            "profile": self.profile.document(),
            "require_created": self.require_created,
        }

    @classmethod
    def of_document(cls, document: Mapping[str, Any]) -> ParseFunctionPlan:
        return cls(
            str(document["table"]),
            validate(document["options"]),
            profile_of_document(document["profile"]),
            bool(document["require_created"]),
        )
