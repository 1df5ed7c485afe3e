"""`Feature`: what a feature folder tells the app about itself, so that the app, the body checks and the API
document iterate one list of features (`interface.features`) and the HTTP edge knows none of them.

A feature's `__init__.py` exports one `FEATURE`: its routes (the heavy reads apart, which the app puts behind
the heavy reads' middleware), the content checks of its bodies, the codes its operations refuse with (its
use cases' domain errors, and codes of its own), and its shapes modules (whose Structs the API document
describes with msgspec's own schema)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from litestar.template import TemplateConfig
from litestar.types import ControllerRouterHandler

from interface.http.body_checks import ContentCheck
from interface.shared.refusals import DomainErrors

# the app's handlers of what happens before a route is found, by exception type or status
ExceptionHandlers = dict[Any, Any]


@dataclass(frozen=True)
class Feature:
    """One feature as the app lists it. `problem_codes` gives each operation's refusals by its use cases'
    domain errors (their kind gives the status); `own_codes` the codes beyond the domain's, by status (the
    token endpoint's, a stalled projection, a read model behind); `without_database` the operations that
    never reach the database (the shared machinery's `database_unavailable` is not theirs). A feature with
    pages of its own (the console) may wrap the app's exception handlers and give the templates."""

    name: str
    route_handlers: Sequence[ControllerRouterHandler] = ()
    heavy_reads: Sequence[ControllerRouterHandler] = ()  # behind `interface.http.heavy_reads`, and only they
    body_checks: Mapping[type, ContentCheck] = field(default_factory=dict)
    problem_codes: Mapping[str, DomainErrors] = field(default_factory=dict)
    own_codes: Mapping[str, Mapping[int, Sequence[str]]] = field(default_factory=dict)
    shapes: Sequence[ModuleType] = ()
    without_database: frozenset[str] = frozenset()
    exception_handlers: Callable[[ExceptionHandlers], ExceptionHandlers] | None = None
    templates: Callable[[], TemplateConfig] | None = None
