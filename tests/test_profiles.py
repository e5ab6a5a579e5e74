from __future__ import annotations

from pathlib import Path

import pytest

from connector.errors import ProfileError
from connector.profiles import builtin_profiles, load_profile, profile_for_model
from connector.types.columns import output_schema

PROFILES = Path(__file__).parent / "data" / "profiles"


def test_builtins():
    assert builtin_profiles() == ["coder", "math", "openai", "vl"]
    assert [p.name for p in load_profile("math").content_properties] == ["steps", "answer", "confidence"]
    assert load_profile("openai").content_properties == ()


def test_user_profile_from_issue():
    profile = load_profile(PROFILES / "risk.yaml")
    schema = output_schema(profile)
    assert [f"{f.name}:{f.type}" for f in schema][-6:] == [
        "risk_level:string",
        "approved:bool",
        "score:int64",
        "tags:list<item: string>",
        "detail:string",
        "content_error:string",
    ]
    assert profile.response_format() == {
        "type": "json_schema",
        "json_schema": {
            "name": "risk",
            "schema": {
                "type": "object",
                "properties": {
                    "risk_level": {"type": "string"},
                    "approved": {"type": "boolean"},
                    "score": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "detail": {"type": "object"},
                },
            },
        },
    }


def test_response_json_schema_carries_hints():
    schema = load_profile("coder").response_json_schema()
    assert schema["x-created-unit"] == "seconds"
    assert schema["x-profile"] == "coder"
    assert list(schema["x-content-schema"]["properties"]) == [
        "language",
        "code",
        "explanation",
        "code_blocks",
    ]
    assert schema["properties"]["created"]["type"] == "integer"


def test_model_patterns():
    assert profile_for_model("Qwen/Qwen2.5-Coder-7B-Instruct").name == "coder"
    assert profile_for_model("deepseek-ai/deepseek-vl2-tiny").name == "vl"
    assert profile_for_model("Qwen/Qwen2.5-Math-7B").name == "math"
    assert profile_for_model("meta-llama/Llama-3.1-8B").name == "openai"


@pytest.mark.parametrize(
    "name,message",
    [
        ("bad_type.yaml", r"bad_type.yaml: key 'content.properties.score.type': 'integr' is not valid"),
        (
            "bad_regex.yaml",
            r"bad_regex.yaml: key 'content.properties.answer.x-extract.pattern': '\(unclosed' is not an RE2 pattern \(missing \): \(unclosed\); patterns are RE2",
        ),
        (
            "bad_key.yaml",
            r"bad_key.yaml: key '\(top level\)': Additional properties are not allowed \('creatd'",
        ),
        (
            "clash.yaml",
            r"clash.yaml: key 'content.properties.model': clashes with the column 'model'; rename it",
        ),
    ],
)
def test_bad_profile_names_file_and_key(name: str, message: str):
    with pytest.raises(ProfileError, match=message):
        load_profile(PROFILES / name)


def test_unknown_profile_and_missing_file(tmp_path: Path):
    with pytest.raises(ProfileError, match="unknown profile 'nope': use one of coder, math, openai, vl"):
        load_profile("nope")
    with pytest.raises(ProfileError, match="missing.yaml: profile file not found"):
        load_profile(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ProfileError, match="bad.yaml: not valid YAML"):
        load_profile(bad)
    bad.write_text("- a list")
    with pytest.raises(ProfileError, match="bad.yaml: expected a mapping with at least 'name', got list"):
        load_profile(bad)


@pytest.mark.slow
def test_wheel_ships_builtin_profiles(tmp_path: Path):
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(root)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"connector/_schemas/{n}.yaml" for n in builtin_profiles()} <= names


def test_content_schema_with_refs_and_nullable_anyof(tmp_path: Path):
    """What pydantic's model_json_schema() writes: $defs/$ref, Optional[...] as anyOf with null."""
    import json

    from connector.parse import parse_batch
    from tests.bodies import chat, choice, encode

    content = {
        "$defs": {
            "Level": {"enum": ["low", "high"], "title": "Level", "type": "string"},
            "Span": {"properties": {"a": {"type": "integer"}}, "title": "Span", "type": "object"},
        },
        "properties": {
            "level": {"$ref": "#/$defs/Level"},
            "score": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None, "title": "Score"},
            "tags": {"anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}]},
            "span": {"anyOf": [{"$ref": "#/$defs/Span"}, {"type": "null"}]},
            "spans": {"items": {"$ref": "#/$defs/Span"}, "type": "array"},
        },
        "required": ["level"],
        "title": "Answer",
        "type": "object",
    }
    path = tmp_path / "pyd.yaml"
    path.write_text(json.dumps({"name": "pyd", "content": content}))
    profile = load_profile(path)
    assert [f"{f.name}:{f.type}" for f in output_schema(profile)][-6:] == [
        "level:string",
        "score:int64",
        "tags:list<item: string>",
        "span:string",
        "spans:string",
        "content_error:string",
    ]
    assert profile.response_format()["json_schema"]["schema"] == content
    answer = {"level": "high", "score": None, "tags": ["x"], "span": {"a": 1}, "spans": [{"a": 2}]}
    row = parse_batch([encode(chat(choices=[choice(json.dumps(answer))]))], profile, "cpu").table.to_pylist()[0]
    assert (row["level"], row["score"], row["tags"], row["span"], row["spans"]) == (
        "high",
        None,
        ["x"],
        '{"a":1}',
        '[{"a":2}]',
    )


def test_a_ref_that_does_not_resolve_names_the_key(tmp_path: Path):
    path = tmp_path / "bad_ref.yaml"
    path.write_text("name: r\ncontent:\n  type: object\n  properties:\n    x: {$ref: '#/$defs/Nope'}\n")
    with pytest.raises(
        ProfileError, match=r"bad_ref.yaml: key 'content.properties.x.\$ref': '#/\$defs/Nope' does not resolve"
    ):
        load_profile(path)


def test_pattern_that_pyarrows_re2_refuses_is_a_profile_error(tmp_path: Path):
    # google-re2 takes `(?<name>...)`; pyarrow 16's RE2 (the gpu backend's x-extract) does not. The check
    # once ran on an empty array, where pyarrow compiles nothing, and let it through.
    profile = tmp_path / "named.yaml"
    profile.write_text(
        "name: named\nextends: openai\ncontent:\n  type: object\n  properties:\n    answer:\n"
        "      type: string\n      x-extract: {pattern: '(?<n>a)'}\n"
    )
    with pytest.raises(ProfileError, match=r"named.yaml: key 'content.properties.answer.x-extract.pattern'"):
        load_profile(profile)
