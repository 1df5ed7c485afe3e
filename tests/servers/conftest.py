"""Tests that start API servers of their own on the session's database (a rate-limited one, one whose
callbacks go to local receivers, ones that get signals). They are a package apart from `tests/process` so
that its package server is stopped before they start: the process tests run one at a time on one xdist
worker (see `tests/conftest.py`), and their servers' connections never add up."""

from __future__ import annotations

from tests.e2e.conftest import addresses  # noqa: F401  (package-scoped: this package's own)
