"""Helpers of the audit tests: a database of their own, a ledger writing real flows to its event store, the
projections of the catalog brought up to date, and tampering with stored rows as an intruder would."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from application.adapters.addresses import Bip32AddressBook
from application.commands import BuyRequest, DepositReport, SellRequest, SendoutReport
from application.ledger import Ledger
from application.ports import SystemClock
from application.settings import load_settings
from application.store.database import ensure_schema, eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.audit_sql import small_pool
from projections.base.runner import ProjectionSpec, open_view, replay
from projections.catalog import PROJECTIONS
from tests.application.conftest import use_cases_of
from tests.databases import scratch_database

FIRST_ADDRESS_INDEX = 5000  # customers' own addresses; the service hands out deposit addresses from 0


@contextmanager
def own_database(server_url: str, template: str | None = None) -> Iterator[str]:
    """A new database with the event store's schema, or a copy of the database at `template` (which must
    have no connections left); dropped, with its connections, at the end."""
    source = conninfo_to_dict(template)["dbname"] if template is not None else None
    with scratch_database(server_url, "broker_audit", source) as url:
        ensure_schema(url, EVENTS_SCHEMA)
        yield url


def new_ledger(url: str, pool_size: int = 2) -> Ledger:
    settings = load_settings()
    clock = SystemClock()
    env = {
        **eventsourcing_env(url, EVENTS_SCHEMA),
        "POSTGRES_POOL_SIZE": str(pool_size),
        "POSTGRES_MAX_OVERFLOW": "0",
    }
    return Ledger(settings, clock, env=env)


class Flows:
    """Whole customer lives on a ledger, through its use cases: registered, an account, a buy completed, a
    sell paid out."""

    def __init__(self, ledger: Ledger, prefix: str = "c", partner: str = "demo") -> None:
        self.ledger = ledger
        self.use_cases = use_cases_of(ledger)
        self.prefix = prefix
        self.partner = partner
        self.book = Bip32AddressBook(ledger.settings.cryptos)
        self._numbers = itertools.count()

    def customer_life(self, index: int | None = None) -> None:
        i = next(self._numbers) if index is None else index
        code = f"{self.prefix}{i}"
        use_cases, partner = self.use_cases, self.partner
        use_cases.customers.register_customer(partner, code, "Basic", status="ACTIVE")
        address = self.book.derive("BTC", FIRST_ADDRESS_INDEX + _address_index(self.prefix, i)).address
        account, _ = use_cases.customers.open_account(partner, code, address)
        buy = BuyRequest(
            customer_code=code,
            currency="EUR",
            crypto="BTC",
            fiat_value=Decimal("100.00"),
            destination_address=address,
            payment_method="BANK_EUR_BUY",
        )
        bought = use_cases.buys.create(partner, buy, stage=False)
        use_cases.settlement.report_sendout(partner, SendoutReport(bought.code, f"out-{bought.code}", 2))
        sell = SellRequest(
            customer_code=code,
            account_code=account.code,
            currency="EUR",
            crypto="BTC",
            payment_method="BANK_EUR_SELL",
            crypto_amount=Decimal("0.00123457"),
        )
        sold = use_cases.sells.create(partner, sell)
        deposit = DepositReport(
            "BTC", sold.order.destination_address, f"in-{sold.code}", sold.order.quote.crypto_amount, 2
        )
        use_cases.settlement.report_deposit(partner, deposit)
        use_cases.settlement.pay_out(partner, sold.code)

    def lives(self, count: int) -> None:
        for _ in range(count):
            self.customer_life()


def _address_index(prefix: str, i: int) -> int:
    """Distinct address indexes for writers with distinct one-letter prefixes."""
    return (ord(prefix[0]) - ord("a")) * 100_000 + i


def catch_up(url: str, specs: tuple[ProjectionSpec, ...] = PROJECTIONS) -> int:
    """Brings every projection's live view up to the head of the log, as a running worker would."""
    log_app = LedgerLog(env=small_pool(eventsourcing_env(url, EVENTS_SCHEMA)))
    try:
        for spec in specs:
            view = open_view(url, spec)
            try:
                replay(log_app, spec, view)
            finally:
                view.datastore.close()
        return log_app.recorder.max_notification_id() or 0
    finally:
        log_app.close()


def query(url: str, statement: str | sql.Composable, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cursor = conn.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


def stored_event(url: str, topic_suffix: str, nth: int = 0) -> dict[str, Any]:
    """The `nth` stored event whose topic ends with `topic_suffix`, as its row."""
    rows = query(
        url,
        "SELECT notification_id, originator_id, originator_version, topic, state FROM ledger.ledger_events "
        "WHERE topic LIKE %s ORDER BY notification_id",
        f"%{topic_suffix}",
    )
    return rows[nth]


def named_in(text: str, event: dict[str, Any]) -> bool:
    """Whether `text` names the event: notification id, aggregate id, version and topic."""
    return all(
        str(part) in text
        for part in (
            f"notification {event['notification_id']} ",
            event["originator_id"],
            f"version {event['originator_version']}",
            event["topic"],
        )
    )


def lives(url: str, prefix: str, count: int = 1) -> None:
    """`count` customers' whole lives (register, account, buy, sell, payout) written to `url`'s log."""
    ledger = new_ledger(url)
    try:
        Flows(ledger, prefix=prefix).lives(count)
    finally:
        ledger.close()
