"""Every answer and every OPTIONS request: amounts written as exact JSON numbers (`LedgerResponse`), and the
methods of a path listed (`allow_every_method`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.serialization import default_serializer

JSON_ENCODER = msgspec.json.Encoder(enc_hook=default_serializer, decimal_format="number")


def positional(value: Any) -> Any:
    """Decimal amounts as JSON numbers in positional notation (0.00000000 rather than 0E-8), exact."""
    if isinstance(value, Decimal):
        return msgspec.Raw(format(value, "f").encode())
    if isinstance(value, dict):
        return {key: positional(item) for key, item in value.items()}
    if isinstance(value, list):
        return [positional(item) for item in value]
    return value


class LedgerResponse(Response):
    """Writes Decimal amounts as JSON numbers, exact to the last digit (litestar would write strings)."""

    def render(self, content: Any, media_type: str, enc_hook: Any = default_serializer) -> bytes:
        if not isinstance(content, bytes | str) and "json" in media_type:
            plain = msgspec.to_builtins(content, builtin_types=(Decimal,), enc_hook=enc_hook)
            return JSON_ENCODER.encode(positional(plain))
        return super().render(content, media_type, enc_hook)


async def allow_every_method(request: Request) -> Response | None:
    """Answers OPTIONS with every method of the path. Litestar 2 lists only the first handler registered on
    a path (litestar-org/litestar#4169, fixed in 3), e.g. PUT but not GET for /customer/{code}. A coroutine:
    litestar runs a plain function hook in a worker thread, a thread hop for every request."""
    if request.method != "OPTIONS":
        return None
    paths = request.route_handler.paths
    methods = {method for route in request.app.routes if route.path in paths for method in route.methods}
    return Response(None, status_code=204, headers={"Allow": ", ".join(sorted(methods))})
