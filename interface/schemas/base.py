from __future__ import annotations

import msgspec


class Body(msgspec.Struct, kw_only=True, frozen=True, rename="camel", forbid_unknown_fields=True):
    """Base of every request and response body."""


Code = msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:@-]+$")
Text = msgspec.Meta(max_length=512)
