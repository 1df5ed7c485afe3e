"""The rules of the layout that import-linter cannot state (pyproject.toml's [tool.importlinter] holds the
others: the layers, features independent of each other, `interface.http` independent of the features):

- no module of ours passes MAX_LINES lines: a module that grows past it is split by what it holds;
- the import graph has no cycle, between modules nor between folders (a folder's modules importing another
  folder whose modules import it back, a parent package included);
- only `application/store/` and the projections' tracking recorders (`projections/`) import eventsourcing's
  persistence (`eventsourcing.persistence`, `eventsourcing.postgres`): the domain, the use cases and the
  interface reach the log through `application.store` (import-linter sees external packages only whole, so
  this one is read from the modules' imports here).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "application", "interface", "projections")
MAX_LINES = 500
PERSISTENCE = ("eventsourcing.persistence", "eventsourcing.postgres")
MAY_IMPORT_PERSISTENCE = ("application/store/", "projections/")


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_module_passes_500_lines() -> None:
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines: split each by what it holds"


def test_only_the_store_and_the_projections_import_eventsourcings_persistence() -> None:
    found = {
        path.relative_to(ROOT).as_posix(): sorted(
            name for name in imported(path) if name.startswith(PERSISTENCE)
        )
        for path in modules()
        if not path.relative_to(ROOT).as_posix().startswith(MAY_IMPORT_PERSISTENCE)
    }
    assert {module: names for module, names in found.items() if names} == {}


def test_the_import_graph_has_no_cycle_between_modules_nor_between_folders() -> None:
    graph = grimp.build_graph(*PACKAGES)
    modules: dict[str, set[str]] = defaultdict(set)
    folders: dict[str, set[str]] = defaultdict(set)
    for module in graph.modules:
        for imported_module in graph.find_modules_directly_imported_by(module):
            modules[module].add(imported_module)
            if (here := _folder(graph, module)) != (there := _folder(graph, imported_module)):
                folders[here].add(there)
    assert _cycles(modules) == [], "modules importing each other, through the others listed"
    assert _cycles(folders) == [], "folders importing each other"


def _folder(graph: grimp.ImportGraph, module: str) -> str:
    return module if graph.find_children(module) else module.rpartition(".")[0]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    nodes = set(edges) | {node for targets in edges.values() for node in targets}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while (member := stack.pop()) != node:
                        group.append(member)
                    if group:
                        found.append(sorted([node, *group]))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(edges.get(target, ())))))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return found
