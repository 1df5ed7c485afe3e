"""Trust-level limits hold under concurrent requests: many threads race to buy for one customer through one
shared `Ledger`, and exactly as many buys as the daily limit admits are recorded."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest

from application.commands import BuyRequest
from domain.errors import TrustLevelLimitExceeded
from domain.transaction import Transaction
from tests.application.conftest import open_btc_account, register_active

THREADS = 50
BASIC_BUY_DAILY = Decimal("1000")


@pytest.fixture
def pooled_env(postgres_env):
    """Enough connections for every thread at once."""
    return {**postgres_env, "POSTGRES_POOL_SIZE": "20", "POSTGRES_MAX_OVERFLOW": "40"}


def race(ledger, customer: str, address: str, fiat_value: Decimal) -> list[Transaction | Exception]:
    request = BuyRequest(
        customer_code=customer,
        currency="EUR",
        crypto="BTC",
        fiat_value=fiat_value,
        destination_address=address,
        payment_method="BANK_EUR_BUY",
    )
    start = threading.Barrier(THREADS)

    def attempt(i: int) -> Transaction | Exception:
        start.wait()
        try:
            return ledger.create_buy("demo", request, stage=i % 2 == 0)
        except Exception as error:
            return error

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        return list(pool.map(attempt, range(THREADS)))


def test_concurrent_buys_never_pass_the_daily_limit(make_ledger, pooled_env, addresses):
    ledger = make_ledger(pooled_env)
    # 6 x 150 = 900 fits, 7 do not; 4 x 250 is the limit exactly; 3 x 333 = 999 fits, 4 do not.
    for run, (amount, admitted) in enumerate([("150", 6), ("250", 4), ("333", 3)]):
        customer = f"racer-{run}"
        address = addresses.next()
        register_active(ledger, "demo", customer, "Basic")
        open_btc_account(ledger, "demo", customer, address)

        outcomes = race(ledger, customer, address, Decimal(amount))

        created = [o for o in outcomes if isinstance(o, Transaction)]
        refused = [o for o in outcomes if isinstance(o, TrustLevelLimitExceeded)]
        others = [o for o in outcomes if o not in created and o not in refused]
        assert others == []
        assert (len(created), len(refused)) == (admitted, THREADS - admitted)
        assert len({t.code for t in created}) == admitted
        usage = {(u.direction, u.period): u for u in ledger.limits("demo", customer)}
        assert usage["buy", "daily"].used == admitted * Decimal(amount) <= BASIC_BUY_DAILY
        assert usage["buy", "monthly"].used == admitted * Decimal(amount)
        for transaction in created:
            assert ledger.transaction("demo", transaction.code).version == transaction.version
