"""CPU of `create_buy` in-process for a customer whose day and month limit windows already hold many buys.

Run:

    .venv/bin/python bench/limit_windows.py [--history 200] [--buys 200]
                                            [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

Builds a `Ledger` (group commit on, as in production) on a fresh schema, registers one ACTIVE customer of
trust level Plus with a BTC account, makes `--history` buys for it (all in the same UTC day and month, the
clock stands still), then measures `--buys` more, one after the other on one thread. Prints the CPU of this
process per measured buy (`time.process_time`, every thread: the use case, psycopg and the group committer)
and the events decoded per measured buy (snapshots included), all of them and those of the limit windows.
The schema is dropped afterwards.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

from application.adapters.addresses import Bip32AddressBook
from application.adapters.prices import FixedPrices
from application.commands import BuyRequest
from application.ledger import Ledger
from application.settings import load_settings
from application.store.database import ensure_schema, eventsourcing_env
from application.use_cases import UseCases
from bench.clock import FakeClock

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
CUSTOMER_ADDRESS_INDEX = 1000  # a customer address of the demo keys, never one of the deposit addresses
WINDOW_TOPIC = "domain.limits:LimitWindow"


def count_decoded(ledger: Ledger, decoded: Counter[str]) -> None:
    """Counts every stored event the ledger's mapper decodes, by aggregate (the limit windows apart)."""
    decode: Callable[[Any], Any] = ledger.mapper.to_domain_event

    def counting(stored: Any) -> Any:
        decoded["all"] += 1
        if stored.topic.startswith(WINDOW_TOPIC):
            decoded["windows"] += 1
        return decode(stored)

    ledger.mapper.to_domain_event = counting  # type: ignore[method-assign]


def run(url: str, history: int, buys: int) -> None:
    schema = f"bench_limits_{uuid.uuid4().hex[:8]}"
    ensure_schema(url, schema)
    settings = load_settings()
    clock = FakeClock(NOW)  # stands still: every buy in the same day and month
    addresses = Bip32AddressBook(settings.cryptos)
    ledger = Ledger(settings, clock, env=eventsourcing_env(url, schema))
    use_cases = UseCases.of(ledger, FixedPrices(settings, clock), addresses)
    try:
        use_cases.customers.register_customer("demo", "busy", "Plus", status="ACTIVE")
        address = addresses.derive("BTC", CUSTOMER_ADDRESS_INDEX).address
        use_cases.customers.open_account("demo", "busy", address)
        request = BuyRequest("busy", "EUR", "BTC", Decimal("10.01"), address, "BANK_EUR_BUY")
        for _ in range(history):
            use_cases.buys.create("demo", request, stage=False)
        decoded: Counter[str] = Counter()
        count_decoded(ledger, decoded)
        started = time.process_time()
        for _ in range(buys):
            use_cases.buys.create("demo", request, stage=False)
        cpu = time.process_time() - started
        per_buy = {part: count / buys for part, count in decoded.items()}
        used = {(u.direction, u.period): u.used for u in use_cases.limits.usage("demo", "busy")}
    finally:
        ledger.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    assert used["buy", "monthly"] == (history + buys) * Decimal("10.01"), used
    print(
        f"history {history} buys, measured {buys}: {cpu / buys * 1e6:.0f} µs CPU per buy, "
        f"{per_buy['all']:.2f} events decoded per buy ({per_buy['windows']:.2f} of windows)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--buys", type=int, default=200)
    args = parser.parse_args()
    run(args.database_url, args.history, args.buys)


if __name__ == "__main__":
    main()
