"""The rules of the layout that import-linter cannot state (pyproject.toml's [tool.importlinter] holds the
others: the layers, features independent of each other, `interface.http` independent of the features):

- no module of ours passes MAX_LINES lines: a module that grows past it is split by what it holds;
- only `application/store/` and the projections' tracking recorders (`projections/`) import eventsourcing's
  persistence (`eventsourcing.persistence`, `eventsourcing.postgres`): the domain, the use cases and the
  interface reach the log through `application.store` (import-linter sees external packages only whole, so
  this one is read from the modules' imports here).
"""

from __future__ import annotations

import ast
from pathlib import Path

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
