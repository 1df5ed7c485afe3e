"""The delivery worker: threads that send due callbacks, sign them, record every attempt and schedule retries.

Every API worker process runs one (`senders` threads); the outbox's leases let them share the work safely
and keep each transaction's deliveries in order (see `outbox`). For each delivery:

- the URL is checked again and resolved (`urls`), and the request goes to a vetted address only (`sender`);
- the body is `{id, type, created, transaction}` (rendered by the interface's presenter from the state the
  outbox kept), signed as Standard Webhooks with the partner's secret: headers `webhook-id` (the stable event
  id), `webhook-timestamp` (the attempt's time) and `webhook-signature` (`v1,<base64 HMAC-SHA256>`; during
  a secret rotation's overlap one such entry per secret, space-separated, the new secret's first: see
  `secrets`);
- a 2xx answer delivers it; 410 Gone stops the endpoint (this and every later delivery to the URL); anything
  else (another status, a redirect, a timeout, a refused URL) is retried after an exponential backoff with
  jitter, until the next try would be more than `window` seconds (24 h) after the first attempt: then the
  delivery is given up (FAILED) and the transaction's next delivery may go.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from prometheus_client import Counter
from standardwebhooks import Webhook

from domain.errors import CallbackUrlRefused
from domain.transaction import Transaction
from projections.callbacks.delivery_config import DeliveryConfig
from projections.callbacks.outbox import DELIVERED, FAILED, STOPPED, Attempt, Delivery, DeliveryStore
from projections.callbacks.secrets import SigningSecrets
from projections.callbacks.sender import Answer, SendFailed, post
from projections.callbacks.snapshots import restore
from projections.callbacks.urls import CallbackUrlPolicy, ResolvedUrl

CALLBACK_ATTEMPTS = Counter(
    "broker_ledger_callback_attempts",
    "Callback deliveries tried, by outcome (delivered, failed, stopped)",
    ["outcome"],
)

log = logging.getLogger("broker_ledger.callbacks")
EVENT_TYPE = "transaction.status_changed"
USER_AGENT = "broker-ledger-callbacks/1"

Renderer = Callable[[Delivery, Transaction], bytes]  # the request body of a delivery
Sender = Callable[[ResolvedUrl, bytes, dict[str, str], float], Answer]


def backoff(attempt: int, config: DeliveryConfig, rng: random.Random | None = None) -> float:
    """Seconds to wait after the `attempt`-th failed attempt: exponential, capped, with "equal jitter" (half
    of it fixed, half random), so receivers that fail together are not retried together."""
    ceiling = min(config.retry_cap_seconds, config.retry_base_seconds * 2 ** min(attempt - 1, 40))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def signed_headers(secret: str | Sequence[str], event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (and the content type): signed with `secret`, or with
    each of several, their signatures in that order in the one header, space-separated."""
    at = datetime.fromtimestamp(timestamp, UTC)
    keys = [secret] if isinstance(secret, str) else secret
    signature = " ".join(Webhook(key).sign(event_id, at, body.decode()) for key in keys)
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


class DeliveryWorker:
    def __init__(
        self,
        store: DeliveryStore,
        policy: CallbackUrlPolicy,
        secrets: Callable[[str], str] | SigningSecrets,
        render: Renderer,
        config: DeliveryConfig | None = None,
        send: Sender = post,
    ) -> None:
        self.store = store
        self.policy = policy
        # a partner's configured secret alone (no rotation can be in force), or with its rotations
        self.secrets = secrets if isinstance(secrets, SigningSecrets) else SigningSecrets(secrets)
        self.render = render
        self.config = config or DeliveryConfig()
        self.send = send
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for number in range(self.config.senders):
            thread = threading.Thread(target=self._run, name=f"callback-sender-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stops claiming; a request in flight is left to finish (its lease lets another worker retry it)."""
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=2)

    def deliver_next(self) -> bool:
        """Sends the next due delivery, if there is one, and records the outcome; whether there was one."""
        delivery = self.store.claim(self.config.lease_seconds)
        if delivery is None:
            return False
        if delivery.endpoint_stopped:
            self.store.finish(delivery, None, STOPPED)
            return True
        attempt = self.attempt(delivery)
        CALLBACK_ATTEMPTS.labels(attempt.outcome).inc()
        if attempt.outcome == DELIVERED:
            self.store.finish(delivery, attempt, DELIVERED)
        elif attempt.outcome == STOPPED:
            log.warning("callback endpoint %s answered 410: no more deliveries to it", delivery.url)
            self.store.stop_endpoint(delivery, attempt)
        else:
            delay = backoff(delivery.attempts + 1, self.config)
            self.store.retry(delivery, attempt, delay, self.config.retry_window_seconds)
        return True

    def attempt(self, delivery: Delivery) -> Attempt:
        """One try at sending `delivery`; never raises."""
        started = time.monotonic()

        def failed(error: str) -> Attempt:
            return Attempt(FAILED, _ms_since(started), error=error)

        try:
            resolved = self.policy.resolve(delivery.url)
            body = self.render(delivery, restore(delivery.state))
            keys = self.secrets.signing(delivery.partner, delivery.salts)
            headers = signed_headers(keys, delivery.event_id, body, int(time.time()))
            answer = self.send(resolved, body, headers, self.config.timeout_seconds)
        except CallbackUrlRefused as error:
            return failed(error.detail)
        except SendFailed as error:
            return failed(str(error))
        except KeyError:
            return failed(f"partner {delivery.partner} has no callback secret (not in the settings)")
        except Exception as error:
            log.exception("callback %s could not be prepared", delivery.event_id)
            return failed(f"internal error: {type(error).__name__}")
        return _answered(answer, _ms_since(started))

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                busy = self.deliver_next()
            except Exception:  # the database may be down for a while: try again later
                log.exception("callback delivery failed; retrying in %.0f s", self.config.timeout_seconds)
                self._stopped.wait(self.config.timeout_seconds)
                continue
            if not busy:
                self._stopped.wait(self.config.poll_seconds)


def _answered(answer: Answer, duration_ms: int) -> Attempt:
    status = answer.status
    if 200 <= status < 300:
        return Attempt(DELIVERED, duration_ms, status, None, answer.address)
    if status == 410:
        return Attempt(STOPPED, duration_ms, status, "410 Gone: endpoint stopped", answer.address)
    error = f"HTTP {status}" + (" (redirects are not followed)" if 300 <= status < 400 else "")
    return Attempt(FAILED, duration_ms, status, error, answer.address)


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)
