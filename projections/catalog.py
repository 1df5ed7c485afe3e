"""Every projection of the service, in the order they are started, rebuilt and verified."""

from __future__ import annotations

from projections.runner import ProjectionSpec

PROJECTIONS: tuple[ProjectionSpec, ...] = ()


def by_name(name: str) -> ProjectionSpec:
    for spec in PROJECTIONS:
        if spec.name.lower() == name.lower():
            return spec
    known = ", ".join(spec.name for spec in PROJECTIONS)
    raise KeyError(f"no projection named {name!r}; known: {known}")
