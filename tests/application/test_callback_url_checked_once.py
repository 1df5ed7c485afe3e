"""A buy or sell that names a callback URL has its host checked (a DNS lookup in the service) once per
create, however many steps of the create need the URL: the content checks, the priced order, the order with
its deposit address."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from application.adapters.addresses import Bip32AddressBook
from application.adapters.prices import FixedPrices
from application.commands import BuyRequest, SellRequest
from application.ledger import Ledger
from application.use_cases import UseCases
from domain.callback_urls import CallbackUrl, CallbackUrlRules

HOOK = "https://hooks.example.com/ledger"


class CountingCheck:
    """The static rules, counting the checks that would resolve the host."""

    def __init__(self, rules: CallbackUrlRules) -> None:
        self.rules = rules
        self.accepted: list[str] = []

    def parse(self, url: str) -> CallbackUrl:
        return self.rules.parse(url)

    def accept(self, url: str) -> CallbackUrl:
        self.accepted.append(url)
        return self.rules.accept(url)


def test_a_buy_and_a_sell_check_their_callback_urls_host_once_each(
    settings, clock, postgres_env, active_customer_with_btc_account: Callable
) -> None:
    _, account = active_customer_with_btc_account("demo", "hooked")
    check = CountingCheck(CallbackUrlRules(settings.callback_http_hosts))
    addresses = Bip32AddressBook(settings.cryptos)
    ledger = Ledger(settings, clock, postgres_env)
    use_cases = UseCases.of(ledger, FixedPrices(settings, clock), addresses, check)
    try:
        buy = BuyRequest(
            "hooked", "EUR", "BTC", Decimal(100), account.customer_address, "BANK_EUR_BUY", callback_url=HOOK
        )
        assert use_cases.buys.create("demo", buy, stage=True).order.callback_url == HOOK
        assert check.accepted == [HOOK]
        sell = SellRequest(
            "hooked",
            account.code,
            "EUR",
            "BTC",
            "BANK_EUR_SELL",
            crypto_amount=Decimal("0.001"),
            callback_url=HOOK,
        )
        assert use_cases.sells.create("demo", sell).order.callback_url == HOOK
        assert check.accepted == [HOOK, HOOK]
    finally:
        ledger.close()
