"""What the callback tests share: settings that allow-list 127.0.0.1 for plain http, fast delivery settings,
a driver that makes transactions with callback URLs, and ways to run the projection and the deliveries."""

from __future__ import annotations

import itertools
import time
from decimal import Decimal

import msgspec

from application.commands import BuyRequest, SendoutReport
from application.ledger import Ledger
from application.settings import DEFAULT_SETTINGS, Settings, load_settings
from application.use_cases import UseCases
from domain.transaction import Transaction
from projections.base.runner import replay
from projections.callbacks.delivery import DeliveryConfig, DeliveryWorker
from projections.callbacks.outbox import DeliveryRecord, DeliveryStore
from projections.callbacks.projection import CallbackOutbox
from projections.catalog import CALLBACK_OUTBOX

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # base64 of 24 bytes
SELL_METHOD_HOOK = "http://127.0.0.1:9/sell-hooks"  # nothing listens on the discard port
FAST = DeliveryConfig(
    timeout_seconds=0.5, retry_base_seconds=0.02, retry_cap_seconds=0.1, poll_seconds=0.02, senders=4
)


def callback_settings(**changes: object) -> Settings:
    """The demo settings with 127.0.0.1 and localhost allow-listed, and a callback URL on the sell method."""
    demo = load_settings(DEFAULT_SETTINGS)
    sell = msgspec.structs.replace(demo.payment_methods["BANK_EUR_SELL"], callback_url=SELL_METHOD_HOOK)
    return msgspec.structs.replace(
        demo,
        callback_http_hosts=["127.0.0.1", "localhost"],
        payment_methods={**demo.payment_methods, "BANK_EUR_SELL": sell},
        **changes,
    )


class Trades:
    """Buys of fresh customers of partner demo, each with a callback URL, moved on by sendout reports."""

    def __init__(self, use_cases: UseCases, addresses: object) -> None:
        self.use_cases = use_cases
        self.addresses = addresses
        self.customers = itertools.count(1)

    def buy(self, url: str | None, stage: bool = False, partner: str = "demo") -> Transaction:
        """Staged, and unless `stage` committed in a second step: Staged and Sending are two deliveries
        (a buy created without `stage` has one, Sending)."""
        code = f"cb-{next(self.customers)}"
        self.use_cases.customers.register_customer(partner, code, "Basic", status="ACTIVE")
        address = self.addresses.next("BTC")  # type: ignore[attr-defined]
        self.use_cases.customers.open_account(partner, code, address)
        request = BuyRequest(
            customer_code=code,
            currency="EUR",
            crypto="BTC",
            fiat_value=Decimal(100),
            destination_address=address,
            payment_method="BANK_EUR_BUY",
            callback_url=url,
        )
        staged = self.use_cases.buys.create(partner, request, stage=True)
        return staged if stage else self.use_cases.buys.commit(partner, staged.code)

    def complete(self, buy: Transaction) -> None:
        """Sendout seen with one confirmation (no status change), then confirmed (COMPLETED)."""
        for confirmations in (1, 2):
            report = SendoutReport(buy.code, f"out-{buy.code}", confirmations)
            self.use_cases.settlement.report_sendout(buy.order.partner, report)


def project(ledger: Ledger, view: CallbackOutbox) -> int:
    return replay(ledger, CALLBACK_OUTBOX, view)


def drain(worker: DeliveryWorker, store: DeliveryStore, codes: list[str], timeout: float = 30.0) -> None:
    """Runs `worker` in this thread until every delivery of `codes` is finished (or `timeout` passes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not worker.deliver_next():
            if all(record.status != "pending" for code in codes for record in listing(store, code)):
                return
            time.sleep(0.01)
    raise AssertionError(f"deliveries still pending after {timeout} s")


def listing(store: DeliveryStore, code: str, partner: str = "demo") -> list[DeliveryRecord]:
    return store.deliveries(partner, code)
