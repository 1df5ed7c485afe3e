"""How the delivery worker (`projections.callbacks.delivery`) times its work: timeouts, backoff, the retry
window, polling and its threads; and how long a rotated-out signing secret still signs. Kept apart from the
worker, which needs an HTTP client, so that the environment's reader (`interface.environment`) can build one
at every start without loading it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ENV_PREFIX = "BROKER_LEDGER_CALLBACK_"  # the variables of the environment that set each field


@dataclass(frozen=True)
class DeliveryConfig:
    timeout_seconds: float = 10.0  # connect, write and each read; DNS lookups too
    retry_base_seconds: float = 5.0  # the first retry after 2.5 to 5 s, each later one up to twice later
    retry_cap_seconds: float = 3600.0  # no wait between two attempts is longer than this
    retry_window_seconds: float = 24 * 3600.0  # no attempt after this long past the first one
    poll_seconds: float = 0.5  # how often an idle sender looks for due deliveries
    senders: int = 4  # threads per process
    signing_overlap_seconds: float = 24 * 3600.0  # how long a rotated-out secret still signs (`secrets`)

    @property
    def lease_seconds(self) -> float:
        """How long a claimed delivery stays with its worker: longer than DNS plus the slowest answer."""
        return 4 * self.timeout_seconds + 2.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> DeliveryConfig:
        """From the environment's variables `env`: `BROKER_LEDGER_CALLBACK_TIMEOUT_SECONDS`,
        `..._RETRY_BASE_SECONDS`, `..._RETRY_CAP_SECONDS`, `..._RETRY_WINDOW_SECONDS`, `..._POLL_SECONDS`,
        `..._SENDERS`, `..._SIGNING_OVERLAP_SECONDS`; the defaults above for those unset or empty."""
        values = {}
        for name, default in vars(cls()).items():
            raw = env.get(ENV_PREFIX + name.upper())
            if raw:
                values[name] = type(default)(raw)
        return cls(**values)
