"""docs/architecture.md names every module of the four packages, and as modules only modules that exist.

The convention, which the document states in its "Packages" section: that section's table has one row per
package, its first cell the package's folder in backticks (`domain/`, `application/store/`,
`interface/controllers/`, ...). In the rest of a row, every backticked name that looks like a module name
(`^[a-z_][a-z0-9_]*$`, optionally followed by `.py`) names a module of that row's package: `money` and
`app.py` name `<package>/money.py` and `<package>/app.py`. Nothing else in backticks is read: classes
(`LedgerStore`), functions written with parentheses (`create_app()`), sub-packages written with a slash
(`controllers/`, each with a row of its own), paths, commands and settings. The rest of the document is not
read.

A module is a `.py` file other than `__init__.py` in `domain/`, `application/`, `interface/` or
`projections/`, or in a sub-package of one of them. Pure file checks: nothing is imported, no database.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("domain", "application", "interface", "projections")
SECTION = "## Packages"
PACKAGE_CELL = re.compile(r"`((?:[a-z_][a-z0-9_]*/)+)`")
BACKTICKED = re.compile(r"`([^`\n]+)`")
MODULE_NAME = re.compile(r"[a-z_][a-z0-9_]*(?:\.py)?")


def packages_section(text: str) -> str:
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def named_modules(text: str) -> dict[str, set[str]]:
    """Each row's package (as `application/store`) and the module names the row gives, without `.py`."""
    named: dict[str, set[str]] = defaultdict(set)
    for line in packages_section(text).splitlines():
        if not line.startswith("|") or line.count("|") < 3:
            continue
        _, first, rest = line.split("|", 2)
        package = PACKAGE_CELL.fullmatch(first.strip())
        if package is None:  # the header and the separator
            continue
        names = (name for name in BACKTICKED.findall(rest) if MODULE_NAME.fullmatch(name))
        named[package.group(1).rstrip("/")].update(name.removesuffix(".py") for name in names)
    return named


def modules() -> dict[str, set[str]]:
    """Each package and sub-package of the four (as `application/store`) and its modules' names."""
    found: dict[str, set[str]] = defaultdict(set)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "__init__.py":
                found[path.parent.relative_to(ROOT).as_posix()].add(path.stem)
    return found


def test_every_module_of_the_four_packages_is_named_in_the_architecture_document() -> None:
    named = named_modules(DOC.read_text())
    missing = sorted(
        f"{package}/{module}.py"
        for package, names in modules().items()
        for module in names - named.get(package, set())
    )
    assert missing == [], (
        f"modules not named in their package's row of the {SECTION!r} table of docs/architecture.md: "
        f"{missing}"
    )


def test_the_architecture_document_names_as_modules_only_modules_that_exist() -> None:
    existing = modules()
    named = named_modules(DOC.read_text())
    assert named, f"no package rows found in the {SECTION!r} section of docs/architecture.md"
    wrong = sorted(
        f"{package}/{name}.py"
        for package, names in named.items()
        for name in names - existing.get(package, set())
    )
    foreign = sorted(
        f"{package}/"
        for package in named
        if package.split("/")[0] not in PACKAGES or not (ROOT / package / "__init__.py").is_file()
    )
    assert (wrong, foreign) == ([], []), (
        f"docs/architecture.md names as modules what is no module of the row's package: {wrong}; "
        f"rows of what is no package (or sub-package) of the four: {foreign}"
    )
