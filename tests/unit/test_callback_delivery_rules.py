"""The delivery rules that need no network: backoff with jitter, Standard Webhooks signatures, settings."""

from __future__ import annotations

import random
import time

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from projections.callbacks.delivery import DeliveryConfig, backoff, signed_headers

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
CONFIG = DeliveryConfig(retry_base_seconds=5, retry_cap_seconds=3600)


@pytest.mark.parametrize("attempt", range(1, 30))
def test_the_backoff_doubles_up_to_the_cap_with_half_of_it_random(attempt: int) -> None:
    ceiling = min(3600, 5 * 2 ** (attempt - 1))
    delays = [backoff(attempt, CONFIG, random.Random(seed)) for seed in range(50)]
    assert all(ceiling / 2 <= delay <= ceiling for delay in delays)
    assert len(set(delays)) > 1  # jitter: receivers failing together are not retried together


def test_retries_fill_the_window_of_24_hours() -> None:
    rng = random.Random(1)
    elapsed, attempts = 0.0, 0
    while elapsed < 24 * 3600:
        attempts += 1
        elapsed += backoff(attempts, CONFIG, rng)
    assert 25 <= attempts <= 60


def test_a_signed_callback_verifies_with_standardwebhooks() -> None:
    body = b'{"id":"evt_1","type":"transaction.status_changed"}'
    headers = signed_headers(SECRET, "evt_1", body, int(time.time()))
    assert Webhook(SECRET).verify(body, headers)["id"] == "evt_1"
    assert headers["webhook-id"] == "evt_1" and headers["webhook-signature"].startswith("v1,")
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body.replace(b"evt_1", b"evt_2"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 32).verify(body, headers)


def test_an_old_signature_is_refused_by_receivers() -> None:
    body = b"{}"
    headers = signed_headers(SECRET, "evt_1", body, int(time.time()) - 600)
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET).verify(body, headers)


def test_the_delivery_settings_come_from_the_environment() -> None:
    config = DeliveryConfig.from_env(
        {"BROKER_LEDGER_CALLBACK_TIMEOUT_SECONDS": "0.5", "BROKER_LEDGER_CALLBACK_SENDERS": "0"}
    )
    assert (config.timeout_seconds, config.senders, config.retry_window_seconds) == (0.5, 0, 86400.0)
    assert config.lease_seconds > 3 * config.timeout_seconds
    assert DeliveryConfig.from_env({}) == DeliveryConfig()
