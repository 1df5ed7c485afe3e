"""Trust-level limits hold under concurrent requests: many threads race to buy for one customer through one
shared `Ledger`, and exactly as many buys as the daily limit admits are recorded."""

from __future__ import annotations

from decimal import Decimal

from application.commands import BuyRequest
from domain.errors import TrustLevelLimitExceeded
from domain.transaction import Transaction
from tests.application.conftest import open_btc_account, race, register_active

THREADS = 50
BASIC_BUY_DAILY = Decimal("1000")


def test_concurrent_buys_never_pass_the_daily_limit(make_use_cases, pooled_env, addresses):
    use_cases = make_use_cases(pooled_env)
    ledger = use_cases.ledger
    # 6 x 150 = 900 fits, 7 do not; 4 x 250 is the limit exactly; 3 x 333 = 999 fits, 4 do not.
    for run, (amount, admitted) in enumerate([("150", 6), ("250", 4), ("333", 3)]):
        customer = f"racer-{run}"
        address = addresses.next()
        register_active(use_cases, "demo", customer, "Basic")
        open_btc_account(use_cases, "demo", customer, address)
        request = BuyRequest(
            customer_code=customer,
            currency="EUR",
            crypto="BTC",
            fiat_value=Decimal(amount),
            destination_address=address,
            payment_method="BANK_EUR_BUY",
        )

        outcomes = race(THREADS, lambda i, r=request: use_cases.buys.create("demo", r, stage=i % 2 == 0))

        created = [o for o in outcomes if isinstance(o, Transaction)]
        refused = [o for o in outcomes if isinstance(o, TrustLevelLimitExceeded)]
        assert len(created) + len(refused) == THREADS, [o for o in outcomes if isinstance(o, Exception)]
        assert len(created) == admitted
        assert len({t.code for t in created}) == admitted
        usage = {(u.direction, u.period): u for u in use_cases.limits.usage("demo", customer)}
        assert usage["buy", "daily"].used == admitted * Decimal(amount) <= BASIC_BUY_DAILY
        assert usage["buy", "monthly"].used == admitted * Decimal(amount)
        for transaction in created:
            assert ledger.store.transaction("demo", transaction.code).version == transaction.version


def test_concurrent_creates_under_one_code_count_their_buy_once(make_use_cases, pooled_env, addresses):
    """A window keeps no list of its orders: the one transaction per code, saved with the windows, is what
    makes retries of one request (one Idempotency-Key, one code) reserve once."""
    use_cases = make_use_cases(pooled_env)
    address = addresses.next()
    register_active(use_cases, "demo", "retrier", "Basic")
    open_btc_account(use_cases, "demo", "retrier", address)
    request = BuyRequest("retrier", "EUR", "BTC", Decimal("100"), address, "BANK_EUR_BUY")

    outcomes = race(20, lambda _: use_cases.buys.create("demo", request, stage=False, code="ONE-KEY"))

    assert all(isinstance(o, Transaction) and o.code == "ONE-KEY" for o in outcomes), outcomes
    usage = {(u.direction, u.period): u.used for u in use_cases.limits.usage("demo", "retrier")}
    assert usage["buy", "daily"] == usage["buy", "monthly"] == Decimal("100")
