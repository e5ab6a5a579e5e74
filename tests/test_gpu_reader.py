"""The GPU reader's calls into pylibcudf, checked against the real package where it is installed.

No GPU is needed: building libcudf's reader options and the dtype tree happens on the host, and without a
GPU the reader must say so. `.ci/run` installs the `gpu` extra so that these run in CI; elsewhere they skip.
What needs the device (the reads themselves) runs in `test_decode.py` on the `gpu` backend.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from connector.errors import BackendUnavailable
from connector.parse.plan import plan_for
from connector.profiles import load_profile
from connector.types.columns import content_read_schema

try:
    from connector.parse import libcudf
except BackendUnavailable as exc:
    pytest.skip(f"pylibcudf is not installed here ({exc})", allow_module_level=True)

import pylibcudf as plc

PROFILES = ["openai", "coder", "math", "vl", str(Path(__file__).parent / "data" / "profiles" / "risk.yaml")]


def _tree(name: str, dtype: plc.DataType, children: list) -> tuple:
    return (name, dtype.id().name, [_tree(*c) for c in children])


def test_dtype_tree_asks_for_every_leaf_as_text():
    schema_type = pa.struct(
        [("a", pa.list_(pa.struct([("b", pa.int64()), ("c", pa.list_(pa.float64()))]))), ("d", pa.bool_())]
    )
    assert _tree("root", *libcudf._dtype(schema_type)) == (
        "root",
        "STRUCT",
        [
            (
                "a",
                "LIST",
                [
                    ("offsets", "INT32", []),
                    (
                        "element",
                        "STRUCT",
                        [("b", "STRING", []), ("c", "LIST", [("offsets", "INT32", []), ("element", "STRING", [])])],
                    ),
                ],
            ),
            ("d", "STRING", []),
        ],
    )


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: Path(p).stem)
@pytest.mark.parametrize("keep_quotes", [False, True])
def test_reader_options_build_for_every_schema(profile: str, keep_quotes: bool):
    """pylibcudf accepts the options as built (strict validation before the options that need it)."""
    prof = load_profile(profile)
    plan = plan_for(prof)
    content = content_read_schema(prof.content_properties)
    # A profile without content properties has no content read at all.
    schemas = [plan.read_schema, content] if len(content) else [plan.read_schema]
    for schema in schemas:
        options = libcudf.json_options(plc.io.SourceInfo([b"[]"]), schema, keep_quotes=keep_quotes)
        assert isinstance(options, plc.io.json.JsonReaderOptions)


def test_column_metadata_names_nested_children():
    meta = libcudf._metadata("choices", {"offsets": {}, "element": {"message": {"content": {}}}})
    assert meta.name == "choices"
    assert [c.name for c in meta.children_meta] == ["offsets", "element"]
    assert meta.children_meta[1].children_meta[0].children_meta[0].name == "content"


def test_without_a_gpu_the_reader_says_why():
    if libcudf.gpu_problem() is None:
        pytest.skip("a GPU is usable here")
    with pytest.raises(
        BackendUnavailable,
        match=r"^no (usable )?NVIDIA GPU.*use the cpu backend \('parse.backend' = 'cpu' in a table, --backend cpu on the command line\)$",
    ):
        libcudf.GpuReader()


def test_device_errors_are_logged_once_data_errors_not_at_all(caplog: pytest.LogCaptureFixture):
    libcudf._device_errors_seen.clear()
    with caplog.at_level("WARNING", logger="connector.parse.libcudf"):
        libcudf._warn_if_device_error(RuntimeError("CUDF failure at: json: Invalid character"))
        libcudf._warn_if_device_error(MemoryError("std::bad_alloc: out_of_memory"))
        libcudf._warn_if_device_error(MemoryError("std::bad_alloc: out_of_memory"))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert warnings[0].startswith("a GPU read failed for the device, not the data (MemoryError: std::bad_alloc")
    libcudf._device_errors_seen.clear()
