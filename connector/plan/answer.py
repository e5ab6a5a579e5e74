"""Answer fields: declared columns that are neither the profile's nor metadata keys (`connector.types.answer`).
Their schema, the profile that reads them, the plan's `answer` (for the JVM's answer check) and what a request
carries to hold the server to the schema."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from connector.errors import OptionsError
from connector.options import (
    ANSWER_CONSTRAINT,
    ANSWER_STRING_CHARACTERS,
    REQUEST_PARAM_OPTIONS,
    Options,
)
from connector.plan.metadata import METADATA
from connector.plan.records import (
    Answer,
)
from connector.plan.records import AnswerField as PlanAnswerField
from connector.profiles import Profile, profile_of_document
from connector.types.answer import AnswerField, answer_options, answer_profile_data, answer_schema
from connector.types.columns import output_schema

__all__ = ["ANSWER_FACTS", "answer_fields", "plan_answer"]


def _of_profile(ftype: Mapping[str, Any], name: str, flat: Mapping[str, str]) -> bool:
    """Whether a declared column is the profile's: a flat column, or a ROW whose fields all are."""
    if name in flat:
        return True
    if ftype.get("root") != "ROW" or not ftype.get("fields"):
        return False
    return all(_of_profile(f["type"], str(f["name"]), flat) for f in ftype["fields"])


def answer_fields(
    columns: Sequence[Mapping[str, Any]], flat: Mapping[str, str], settings: Mapping[str, str]
) -> list[AnswerField]:
    """The declared columns that are answer fields (not the profile's); refuses an 'answer.*' setting that names
    none of them."""
    fields = [
        AnswerField(str(c["name"]), c["type"], c.get("comment"))
        for c in columns
        if not _of_profile(c["type"], str(c["name"]), flat)
    ]
    answer_options(settings, fields)
    return fields


def plan_answer(
    owner: str, profile: Profile, fields: Sequence[AnswerField], options: Options
) -> tuple[Profile, Answer, dict[str, Any] | None]:
    """Answer fields (declared columns that are neither the profile's nor metadata keys, `connector.types.answer`):
    the profile that reads them (the base profile with their schema as its content schema), the plan's "answer"
    (each field's schema, for the JVM's answer check, `io.dspark.vllm.engine.Answers`), and what the request
    carries to hold the server to the schema ('answer.constraint'; None: the prompt says it)."""
    near = [*(f.name for f in fields if f.name not in ANSWER_FACTS)]
    known = [n for n in _flat_names(profile) if n != "line"] + [m.key for m in METADATA]
    for name in near:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            raise OptionsError(
                f"Column '{name}' is neither a column of profile '{profile.name}' nor a metadata key, so it would be "
                f"an answer field: did you mean '{close[0]}'? (An answer field needs a name apart from the "
                "profile's columns and the metadata keys.)"
            )
    names = ", ".join(f.name for f in fields)
    if profile.content_properties:
        raise OptionsError(
            f"Columns {names} are answer fields (neither columns of profile '{profile.name}' nor metadata keys), "
            f"but profile '{profile.name}' has a content schema of its own "
            f"({', '.join(p.name for p in profile.content_properties)}): remove 'profile' (the openai body and "
            "your answer fields), or declare only the profile's columns."
        )
    schema = answer_schema(fields, options.raw, options.get(ANSWER_STRING_CHARACTERS))
    data = answer_profile_data(f"{profile.name}-answer", profile.name, schema)
    answered = profile_of_document([*profile.document(), {"path": f"the answer fields of {owner}", "data": data}])
    constraint = options.get(ANSWER_CONSTRAINT)
    body: dict[str, Any] | None
    if constraint == "response-format":
        strict = {"name": "answer", "schema": schema, "strict": True}
        body = {"response_format": {"type": "json_schema", "json_schema": strict}}
    elif constraint == "structured-outputs":
        body = {"structured_outputs": {"json": schema}}
    else:
        body = None
    plan = Answer(
        fields=tuple(PlanAnswerField(f.name, f.type["sql"], schema["properties"][f.name]) for f in fields),
        schema=schema,
        constraint=constraint,
        facts=tuple(ANSWER_FACTS),  # what the check reads beside the fields, in this order
        max_tokens=options.get(REQUEST_PARAM_OPTIONS["max_tokens"]),
    )
    return answered, plan, body


def _flat_names(profile: Profile) -> list[str]:
    return [f.name for f in output_schema(profile)]


# What the answer check reads beside the fields (io.dspark.vllm.engine.Answers): all made by the answer's profile.
ANSWER_FACTS = ("finish_reason", "refusal", "completion_tokens", "content_error")
