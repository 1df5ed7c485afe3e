"""What encoding and decoding one event costs: the library's JSON transcoder (format 1) against the msgspec
mapper (format 2, `application/store/msgspec_mapper.py`), in one process, side by side.

Usage: .venv/bin/python bench/event_codec.py [--number 1000] [--repeat 15]

Two events: a buy's `Transaction.Staged` (its `Order` with a `Quote` and `Fees`, 15 Decimals, three
datetimes) and a `LimitWindow.Reserved`. Per event and mapper it prints microseconds per
`mapper.to_stored_event` (encode) and per `mapper.to_domain_event` (decode of what that mapper wrote), and
what the msgspec mapper takes to read format-1 bytes (a store written before it). Each figure is the
fastest of `--repeat` rounds of `--number` calls; the rounds take every case in turn, so the old and the new
mapper see the same disturbance from other processes on a shared machine. In memory only.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from eventsourcing.persistence import Mapper
from eventsourcing.utils import get_topic

from application.store.log import LedgerLog
from domain.limits import LimitWindow
from domain.money import Asset
from domain.pricing import Terms, quote_buy
from domain.transaction import Order, Transaction, TransactionType

AT = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
TERMS = Terms(
    fiat=Asset("EUR", 2),
    crypto=Asset("BTC", 8),
    fee_rate=Decimal("0.01"),
    bank_fee=Decimal("0.50"),
    network_fee=Decimal("0.0001"),
    wiggle_up=Decimal("0.10"),
    wiggle_down=Decimal("0.05"),
)


def staged_buy() -> Any:
    order = Order(
        partner="partner-a",
        code="TX00017",
        type=TransactionType.BUY,
        customer_code="customer-0042",
        account_code="AC4F2A9C1B0D3E5F6A7B",
        crypto="BTC",
        currency="EUR",
        payment_method="SEPA",
        destination_address="bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq",
        quote=quote_buy(TERMS, Decimal("50123.45"), Decimal("250.00")),
        limit_amount=Decimal("250.00"),
        callback_url="https://partner.example/callbacks",
        data={"orderRef": "A-17", "desk": "retail"},
    )
    transaction = Transaction.stage_buy(order, AT, AT + timedelta(minutes=30))
    return transaction.collect_events()[0]


def reserved() -> Any:
    window = LimitWindow("partner-a", "customer-0042", "buy", "daily", "2026-03-01")
    window.reserve("TX00017", Decimal("250.00"), Decimal("10000"), "EUR")
    return window.collect_events()[-1]


def fastest(cases: dict[str, Callable[[], object]], number: int, repeat: int) -> dict[str, float]:
    """Microseconds per call of each case: the fastest of `repeat` rounds, each round timing every case."""
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeat):
        for name, call in cases.items():
            best[name] = min(best[name], timeit.timeit(call, number=number) / number * 1e6)
    return best


def cases(old: Mapper[Any], new: Mapper[Any], events: dict[str, Any]) -> dict[str, Callable[[], object]]:
    """(event, mapper, step) -> the call; every mapper's decode reads what it wrote, and `fallback` is the
    new mapper reading the old one's bytes."""
    found: dict[str, Callable[[], object]] = {}
    for name, event in events.items():
        for label, mapper in (("old", old), ("new", new)):
            stored = mapper.to_stored_event(event)
            assert vars(mapper.to_domain_event(stored)) == vars(event), (name, label)
            found[f"{name} {label} encode"] = lambda m=mapper, e=event: m.to_stored_event(e)
            found[f"{name} {label} decode"] = lambda m=mapper, s=stored: m.to_domain_event(s)
        old_stored = old.to_stored_event(event)
        assert vars(new.to_domain_event(old_stored)) == vars(event), name
        found[f"{name} new fallback"] = lambda s=old_stored: new.to_domain_event(s)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    popo = {"PERSISTENCE_MODULE": "eventsourcing.popo"}
    old = LedgerLog(env={**popo, "MAPPER_TOPIC": get_topic(Mapper)}).mapper
    new = LedgerLog(env=popo).mapper
    events = {"Transaction.Staged": staged_buy(), "LimitWindow.Reserved": reserved()}
    best = fastest(cases(old, new, events), args.number, args.repeat)
    print(f"old: {type(old).__name__} (format 1), new: {type(new).__name__} (format 2); µs per call")
    print(f"{'event':<22}{'mapper':<8}{'encode':>10}{'decode':>10}{'state bytes':>13}")
    for name, event in events.items():
        for label, mapper in (("old", old), ("new", new)):
            size = len(mapper.to_stored_event(event).state)
            encode, decode = best[f"{name} {label} encode"], best[f"{name} {label} decode"]
            print(f"{name:<22}{label:<8}{encode:>10.2f}{decode:>10.2f}{size:>13}")
        print(f"{name:<22}{'new':<8}{'':>10}{best[f'{name} new fallback']:>10.2f}   (reading format-1 bytes)")


if __name__ == "__main__":
    main()
