"""Liveness and readiness: routes and shapes, and `FEATURE`, what the app lists of them."""

from __future__ import annotations

from interface.health import shapes
from interface.health.routes import health, liveness
from interface.shared.feature import Feature

FEATURE = Feature(
    name="health",
    route_handlers=[health, liveness],
    own_codes={"health": {503: ["projection_stalled", "committer_stalled", "database_read_only"]}},
    shapes=[shapes],
    without_database=frozenset({"liveness"}),  # it answers while the database is down
)
