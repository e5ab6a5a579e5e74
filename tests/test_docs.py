"""What README.md and docs/ point to exists: the files and folders of the repository they name, the targets and
anchors of their relative links, the Java classes and packages they name by their full name; and every `*.md`
named in a tracked file is a document of the repository. A renamed file or package leaves no dead name behind.
Static: no build, no server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
JAVA = ROOT / "java" / "src"

# A path of the repository, named in prose: a top-level folder of the project, then a file with an extension
# (folders, globs and patterns such as `schemas/*.yaml` or `corpus-<n>` are left out). Not part of a URL or of
# a longer path (the lookbehind), so `https://.../native/...` is not taken for `native/...`.
_PATH = re.compile(
    r"(?<![\w/.:-])((?:connector|tests|jobs|java|native|benchmarks|deploy|docker|schemas|docs)/[\w./-]*?"
    r"\.(?:py|java|sh|md|yaml|yml|json|cpp|h|c|xml|toml|html))(?![\w/-])"
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_JAVA_NAME = re.compile(r"\bio\.dspark\.vllm(?:\.[A-Za-z_]\w*)+")
_MD_NAME = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_paths_named_in_the_docs_exist(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = sorted({m.group(1) for m in _PATH.finditer(text) if not (ROOT / m.group(1)).exists()})
    assert not missing, f"{doc.name} names files that are not in the repository: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_relative_links_and_their_anchors_exist(doc: Path) -> None:
    dead = []
    for target in _LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
            dead.append(target)
    assert not dead, f"{doc.name} links to what is not there: {dead}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_java_names_in_the_docs_exist(doc: Path) -> None:
    """A package (a folder under java/src) or a class (its file), `io.dspark.vllm.sql.SqlRunner.main` too."""
    missing = []
    for name in sorted(set(_JAVA_NAME.findall(doc.read_text(encoding="utf-8")))):
        parts = name.split(".")
        found = any(
            (base / Path(*parts[:n])).is_dir() or (base / Path(*parts[:n])).with_suffix(".java").is_file()
            for base in (JAVA / "main" / "java", JAVA / "test" / "java")
            for n in (len(parts), len(parts) - 1)
            if n > 3
        )
        if not found:
            missing.append(name)
    assert not missing, f"{doc.name} names Java packages or classes that do not exist: {missing}"


def test_every_markdown_file_named_in_the_repository_exists() -> None:
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    )
    documents = {Path(f).name for f in tracked if f.endswith(".md")}
    dead = []
    for name in tracked:
        path = ROOT / name
        if not name or not path.is_file() or path.suffix in {".png", ".jar", ".so", ".gz", ".parquet"}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        dead += [f"{name}: {md}" for md in sorted(set(_MD_NAME.findall(text))) if md not in documents]
    assert not dead, f"these name documents that the repository does not have: {dead}"
