"""Liveness and readiness: routes and shapes."""
