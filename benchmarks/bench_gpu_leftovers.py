"""What libcudf leaves, before and after issue 29: the gpu backend (libcudf emulated) on batches with leftovers.

Until issue 29 the gpu backend sent the bodies libcudf left to the Python exact path one at a time, and the
contents it left to Python (the exact path for JSON, RE2 through pyarrow for free text); since, both go to the
native core in one call. This loads the package of a git revision (`--before`, default main) beside the
working tree's, in this one process, and parses the same batches with each, taking turns (`--rounds`), libcudf
replaced by tests/libcudf_emulator.py of each revision (after one round of each not counted). It prints the
seconds per batch (wall clock: the median of the rounds, so a busy machine's outliers drop out) and the ratio
before / after, for the whole batch and for the step that decides the leftovers (stats `exact_s` +
`content_s` before; `core_s` + `content_s` after). The emulator reads with Python's json, much slower than
libcudf: the whole-batch ratio understates what the step's ratio means on a GPU.

    python benchmarks/bench_gpu_leftovers.py [--before main] [--bodies 5000] [--rounds 5]

The two revisions share the native core built in this tree (connector/_native), so only the Python differs.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_OURS = ("connector", "tests")


def _ours(name: str) -> bool:
    return name in _OURS or name.startswith(tuple(f"{p}." for p in _OURS))


def _load(tree: Path) -> dict[str, ModuleType]:
    """The package (and the libcudf emulator) of `tree`, imported afresh: its modules by name."""
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    sys.path.insert(0, str(tree))
    try:
        import connector.parse  # noqa: F401
        import connector.parse.backends  # noqa: F401
        import connector.parse.flatten  # noqa: F401
        import connector.simulator.responses  # noqa: F401
        import tests.libcudf_emulator  # noqa: F401
    finally:
        sys.path.remove(str(tree))
    return {n: m for n, m in sys.modules.items() if _ours(n)}


def _before_tree(revision: str, into: Path) -> Path:
    """The files of `revision` that the package needs, in `into`, with this tree's build of the native core."""
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "archive",
            revision,
            "connector",
            "schemas",
            "tests/__init__.py",
            "tests/libcudf_emulator.py",
        ],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    native = into / "connector" / "_native"
    native.mkdir(exist_ok=True)
    for built in (ROOT / "connector" / "_native").iterdir():
        (native / built.name).symlink_to(built)
    return into


def _batches(modules: dict[str, ModuleType], n: int) -> dict[str, list[bytes]]:
    make_corpus = modules["connector.simulator.responses"].make_corpus
    rng = random.Random(29)
    cut = [b[: rng.randrange(1, len(b))] if i % 10 == 0 else b for i, b in enumerate(make_corpus(n, "coder", seed=3))]
    return {
        "coder, 80% JSON contents, every 10th body cut": cut,
        "coder, 60% free-text contents (x-extract)": make_corpus(n, "coder", seed=4, json_share=0.4),
    }


def _run(modules: dict[str, ModuleType], bodies: list[bytes]) -> tuple[float, float, Any]:
    """Seconds of one parse of `bodies` with the package `modules` (`stats["seconds"]`), the leftovers' step's
    (its stats by stage: wall clock too, so both figures are), and the result."""
    sys.modules.update(modules)  # what the package imports inside functions comes from the same revision
    backend = modules["connector.parse.backends"].GpuBackend(modules["tests.libcudf_emulator"].EmulatedLibcudfReader())
    result = modules["connector.parse"].parse_batch(bodies, "coder", backend)
    stats = result.stats
    return stats["seconds"], stats.get("exact_s", 0.0) + stats.get("core_s", 0.0) + stats["content_s"], result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="the git revision to compare with (default: main)")
    parser.add_argument("--bodies", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = _load(_before_tree(args.before, Path(tmp)))
        after = _load(ROOT)
        batches = _batches(after, args.bodies)
        print(f"{args.bodies} bodies a batch, {args.rounds} rounds taking turns; seconds, median of the rounds")
        print(
            f"{'batch':<48} {'before s':>9} {'after s':>9} {'x':>6}   {'step before':>11} {'step after':>10} {'x':>6}"
        )
        for name, bodies in batches.items():
            times: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
            results = {}
            for round in range(args.rounds + 1):
                for label, modules in (("before", before), ("after", after)):
                    seconds, step, results[label] = _run(modules, bodies)
                    if round:  # the first round warms both up (imports, the core's first load)
                        times[label].append((seconds, step))
            # The same rows and error rows from both (the suites hold it; here it keeps the figures honest).
            assert results["before"].table.equals(results["after"].table), name
            assert results["before"].errors.equals(results["after"].errors), name

            def median(label: str, k: int, times: dict[str, list[tuple[float, float]]] = times) -> float:
                return sorted(t[k] for t in times[label])[len(times[label]) // 2]

            b, a, sb, sa = median("before", 0), median("after", 0), median("before", 1), median("after", 1)
            left = int(results["after"].stats["core"])
            print(
                f"{name:<48} {b:9.3f} {a:9.3f} {b / a:6.2f}   {sb:11.3f} {sa:7.3f} {sb / max(sa, 1e-9):6.2f}"
                f"   ({left} bodies left to the core)"
            )


if __name__ == "__main__":
    main()
