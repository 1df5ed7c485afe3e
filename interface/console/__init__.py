"""The web console at /console: read-only pages for auditors and operators (docs/console.md)."""
