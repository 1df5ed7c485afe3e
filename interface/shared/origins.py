"""An origin as browsers write it in `Origin` and `Referer`: what the console compares a form's origin with,
and what `BROKER_LEDGER_CONSOLE_ORIGIN` and `serve` set it to."""

from __future__ import annotations

import contextlib
import ipaddress


def origin_of(scheme: str, host: str, port: int | None) -> str:
    """The origin of `scheme://host:port` as a browser writes it (an IPv6 address in brackets, the scheme's
    default port left out)."""
    scheme, host = scheme.lower(), host.lower()
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    default = {"http": 80, "https": 443}[scheme]
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"
