"""The web console at /console: read-only pages for auditors and operators (docs/console.md), and
`FEATURE`, what the app lists of it: its router (outside the API document), the pages it answers in place of
the app's problems under /console, and its templates."""

from __future__ import annotations

from interface.console.pages import template_config, with_console_pages
from interface.console.routes import console_router
from interface.shared.feature import Feature

FEATURE = Feature(
    name="console",
    route_handlers=[console_router()],
    exception_handlers=with_console_pages,  # an unknown /console/... path: a page
    templates=template_config,
)
