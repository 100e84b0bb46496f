"""Chapter 08's modules import each other in one direction only (issue 25: the cycles
broker-serve-tasks and celery_backend-search_experiment are gone). Every import counts,
also one inside a function: a lazy import hides a cycle, it does not break it."""

from __future__ import annotations

import ast
from pathlib import Path

import hpclab.search

PACKAGE = Path(hpclab.search.__file__).parent


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for m in mods:
        tree = ast.parse((PACKAGE / f"{m}.py").read_text())
        deps = set()
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                if n.startswith("hpclab.search."):
                    stem = n.split(".")[2]
                    if stem in mods and stem != m:
                        deps.add(stem)
        graph[m] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d) :] + [d]
            if d not in state and (found := visit(d)):
                return found
        state[m] = 2
        path.pop()
        return []

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return []


def test_the_search_package_has_no_import_cycle():
    graph = _graph()
    assert "celery_app" in graph and "search_config" in graph
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_chapter_07_and_the_trial_do_not_import_the_search():
    """The search (08) uses the cluster (07) and the trial; never the other way round: the
    record both chapters share lives in hpclab.trial_record."""
    root = PACKAGE.parent
    files = [*sorted((root / "cluster").glob("*.py")), root / "trial.py", root / "trial_record.py"]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            mods = []
            if isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            bad = [m for m in mods if m.startswith("hpclab.search")]
            assert not bad, f"{path.name} imports {bad}"
