"""Features register themselves (issue 38): each feature folder of `interface/` exports one `FEATURE`, and the
app, the body checks and the API document iterate `FEATURES` (`interface/features.py`). No database: the
descriptions are read as they are imported."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from litestar import Controller, Router
from litestar.handlers import HTTPRouteHandler

import interface
from interface.features import FEATURES
from interface.shared.feature import Feature

INTERFACE = Path(interface.__file__).parent
ROUTE = re.compile(r"^@(get|post|put|patch|delete)\(|^    @(get|post|put|patch|delete)\(", re.MULTILINE)


def handlers_of(value: Any) -> Iterator[HTTPRouteHandler]:
    """The HTTP route handlers of a controller class, a router or a handler."""
    if isinstance(value, HTTPRouteHandler):
        yield value
    elif isinstance(value, Router):
        for route in value.routes:
            yield from (handler for handler in route.route_handlers if isinstance(handler, HTTPRouteHandler))
    elif isinstance(value, type) and issubclass(value, Controller):
        for member in vars(value).values():
            yield from handlers_of(member)


def operations_of(feature: Feature) -> set[str]:
    return {
        handler.operation_id
        for value in (*feature.route_handlers, *feature.heavy_reads)
        for handler in handlers_of(value)
        if isinstance(handler.operation_id, str)
    }


def test_every_folder_with_routes_is_a_feature_the_app_lists() -> None:
    routed = {path.parent.name for path in INTERFACE.glob("*/*.py") if ROUTE.search(path.read_text())}
    folders = routed - {"http"}  # GET /metrics: the edge's own, on every app
    assert sorted(folders) == sorted(feature.name for feature in FEATURES)


def test_each_feature_is_its_folders_one_description() -> None:
    for feature in FEATURES:
        package = __import__(f"interface.{feature.name}", fromlist=["FEATURE"])
        assert package.FEATURE is feature


def test_a_features_problem_codes_are_of_its_own_operations() -> None:
    for feature in FEATURES:
        named = {*feature.problem_codes, *feature.own_codes, *feature.without_database}
        assert named <= operations_of(feature), f"{feature.name}: {sorted(named - operations_of(feature))}"


def test_no_two_features_name_one_operation() -> None:
    seen: dict[str, str] = {}
    for feature in FEATURES:
        for operation in operations_of(feature):
            assert operation not in seen, f"{operation} of {feature.name} and {seen[operation]}"
            seen[operation] = feature.name


def test_a_feature_checks_only_bodies_of_the_shapes_it_lists() -> None:
    for feature in FEATURES:
        structs = {
            value
            for module in feature.shapes
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, msgspec.Struct)
        }
        assert set(feature.body_checks) <= structs, feature.name
