"""The package's modules import top-down: no import circle among them, counting imports inside functions too; the
rooms below the Flink glue (parse, types, server, plan) do not reach up into it; and none imports the Python
reference path, which lives with the tests (tests/oracle) as the oracle of the native core."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "connector"


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# What each room below the Flink glue may import of the rooms above it. Parsing and the types are used by the
# planner, the command line and the Python workers alike: they know neither. Planning runs on the client with no
# pyflink: of the Flink layer it reads only the metric names it hands to the jar (pure code), and its __main__
# builds the Python parse function's payload there, the one question that needs the worker's code.
_BELOW = {
    "connector.parse": (),
    "connector.types": (),
    "connector.server": (),
    "connector.options": (),
    "connector.plan": ("connector.flink.metrics", "connector.plan.__main__ -> connector.flink.runtime"),
}


def _reaching_up(graph: dict[str, set[str]]) -> list[str]:
    """The imports of a room of `_BELOW` into the Flink glue or the planner that its entry does not allow."""
    above = ("connector.flink", "connector.plan", "connector.cli", "connector.bench", "connector.simulator")
    found = []
    for module, targets in sorted(graph.items()):
        room = next((r for r in _BELOW if module == r or module.startswith(r + ".")), None)
        if room is None:
            continue
        for target in sorted(targets):
            if target == room or target.startswith(room + ".") or not target.startswith(above):
                continue
            if target in _BELOW[room] or f"{module} -> {target}" in _BELOW[room]:
                continue
            found.append(f"{module} -> {target}")
    return found


def test_the_rooms_below_the_flink_glue_do_not_import_it():
    assert _reaching_up(_graph()) == []


def test_the_check_finds_a_room_reaching_up():
    graph = {"connector.parse.batch": {"connector.flink.frames"}, "connector.plan.table": {"connector.flink.env"}}
    assert _reaching_up(graph) == [
        "connector.parse.batch -> connector.flink.frames",
        "connector.plan.table -> connector.flink.env",
    ]


def test_no_import_circle_in_the_package():
    assert _circles(_graph()) == []


def test_the_check_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_flink_packages_lazy_face_lists_what_env_exports():
    """connector.flink names env's functions without importing pyflink (the planner runs without it): its list
    is a second copy of env's, so the two must agree, or a name is missing or fails on first use."""
    import connector.flink
    from connector.flink import env

    assert set(connector.flink.__all__) == set(env.__all__) - {"JAR_DIR"}
    for name in connector.flink.__all__:
        assert getattr(connector.flink, name) is getattr(env, name)


def _imports_of(path: Path) -> set[str]:
    """Every module `path` imports, inside functions too (`from a import b`: a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _oracle_imports(root: Path) -> dict[str, list[str]]:
    """The modules under `root` that import the Python reference path (tests/oracle), or a module of it that the
    package once had (parsing runs in the native core; the reference is the tests')."""
    moved = ("connector.parse.exact", "connector.parse.content", "connector.parse.extract", "connector._unprintable")
    found = {}
    for path in sorted(root.rglob("*.py")):
        bad = sorted(m for m in _imports_of(path) if m == "tests" or m.startswith(("tests.", *moved)))
        if bad:
            found[str(path.relative_to(root.parent))] = bad
    return found


def test_the_package_does_not_import_the_reference_path():
    assert _oracle_imports(ROOT) == {}
    assert not any((ROOT / "parse" / f"{name}.py").exists() for name in ("exact", "content", "extract"))


def test_the_reference_check_finds_an_import(tmp_path: Path):
    package = tmp_path / "connector"
    (package / "parse").mkdir(parents=True)
    (package / "parse" / "batch.py").write_text("def f():\n    from tests.oracle.exact import decode_body\n")
    (package / "cli.py").write_text("import connector.parse.exact\nimport tests_of_mine\n")
    assert _oracle_imports(package) == {
        "connector/cli.py": ["connector.parse.exact"],
        "connector/parse/batch.py": ["tests.oracle.exact", "tests.oracle.exact.decode_body"],
    }


# The jar's packages, top-down: the faces Flink SQL calls (sql: factories, options, sources, the SQL runner, the
# planner's client), the runtime they build (engine: the engine builder, request step, ML_PREDICT's function, parse
# batch, row shape), what it runs (store, request, parse: the native core), and the plan's records (plan). A
# package names only those below it, comments included.
JAVA_ROOMS = ("sql", "engine", "store", "request", "parse", "plan")
JAVA = Path(__file__).resolve().parents[1] / "java" / "src" / "main" / "java" / "io" / "dspark" / "vllm"


def _java_upward(sources: dict[str, str]) -> list[str]:
    """'package -> package' for each name of a package at or above its own in JAVA_ROOMS (`sources`: path ->
    text, the path's folder its package)."""
    import re

    found = []
    for path, text in sources.items():
        own = Path(path).parent.name
        for used in sorted(set(re.findall(r"io\.dspark\.vllm\.(\w+)\.", text))):
            if used != own and (used not in JAVA_ROOMS or JAVA_ROOMS.index(used) < JAVA_ROOMS.index(own)):
                found.append(f"{path}: {own} -> {used}")
    return found


def test_the_jars_packages_are_the_rooms_top_down():
    packages = sorted(p.name for p in JAVA.iterdir() if p.is_dir())
    assert packages == sorted(JAVA_ROOMS)
    sources = {str(p.relative_to(JAVA)): p.read_text() for p in JAVA.rglob("*.java")}
    assert _java_upward(sources) == []


def test_the_rooms_check_finds_a_name_upward():
    assert _java_upward({"engine/A.java": "import io.dspark.vllm.sql.B;", "sql/B.java": "io.dspark.vllm.engine.A"}) == [
        "engine/A.java: engine -> sql"
    ]
