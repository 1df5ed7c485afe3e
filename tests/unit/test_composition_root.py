"""One composition root, one way to inject: `interface/app.py` builds every long-lived part (`build_runtime`)
and hands each to what needs it, routes by dependency injection (`dependencies()`), middlewares, the
authentication backend and the request class when they are constructed. No other module of `interface/`
reads the app's state: not `app.state` (of a request, a connection or a middleware), not
`scope["litestar_app"].state`, not a parameter annotated `State` nor an unannotated `state` (litestar
hands a handler or a dependency the app's state by that name). The request's own state (`scope["state"]`,
where a request's writes are kept) is no app state, and may be read.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSITION_ROOT = "interface/app.py"


def reads_of_app_state(source: str) -> list[str]:
    """What in `source` reads the app's state, one line each (`line: what`)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "state" and _is_app(node.value):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            arguments = node.args
            for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                unannotated_state = argument.arg == "state" and argument.annotation is None
                if unannotated_state or _names_state(argument.annotation):
                    found.append(f"{argument.lineno}: the parameter {argument.arg}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module == "litestar.datastructures"
            and any(alias.name == "State" for alias in node.names)
        ):
            found.append(f"{node.lineno}: imports litestar's State")
    return found


def _is_app(node: ast.expr) -> bool:
    """`app`, `x.app`, or `scope["litestar_app"]`: the application, whose `.state` is the app's state."""
    if isinstance(node, ast.Name):
        return node.id == "app"
    if isinstance(node, ast.Attribute):
        return node.attr == "app"
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value == "litestar_app"
    return False


def _names_state(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return text in ("State", "'State'", '"State"') or text.endswith(".State")


def test_no_module_but_the_composition_root_reads_the_apps_state() -> None:
    found = {
        path.relative_to(ROOT).as_posix(): reads
        for path in sorted((ROOT / "interface").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != COMPOSITION_ROOT
        and (reads := reads_of_app_state(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "hand it what it needs from the composition root (interface/app.py) instead"


def test_the_scan_sees_every_way_of_reading_the_apps_state() -> None:
    source = """
from litestar.datastructures import State

def handler(state: State) -> None: ...
def dependency(state) -> None: ...
def annotated(app_state: "State") -> None: ...
async def middleware(scope, connection, request) -> None:
    scope["litestar_app"].state.idempotency
    connection.app.state.tokens
    request.app.state.get("body_checks")
    app.state.runtime
"""
    assert len(reads_of_app_state(source)) == 8


def test_the_requests_own_state_is_no_app_state() -> None:
    source = """
def unit_of(request, scope) -> None:
    scope.setdefault("state", {})["unit_of_work"] = 1
    request.scope.get("state")
    stored.state.startswith(b"")

def _projection(state: ProjectionState) -> None: ...
"""
    assert reads_of_app_state(source) == []
