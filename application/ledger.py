"""`Ledger`: the application the interface talks to, one method per use case."""

from __future__ import annotations

from application.alternative import AlternativeFlows
from application.customers import Customers
from application.history import History
from application.reserves import Reserves
from domain.errors import CurrencyNotFound
from domain.pricing import Price


class Ledger(AlternativeFlows, Customers, Reserves, History):
    """Customers and accounts (`Customers`), buys and sells (`Trading`), chain reports, payouts and
    expiry (`Settlement`), the alternative endpoints' flows (`AlternativeFlows`), transaction histories
    (`History`), prices. Everything the ledger decides is recorded as domain events."""

    def price_list(self, currency: str) -> dict[str, Price]:
        """Buy and sell prices of every crypto-currency in one fiat currency."""
        if currency not in self.settings.currencies:
            known = ", ".join(sorted(self.settings.currencies))
            raise CurrencyNotFound(f"no prices in {currency!r}; supported currencies: {known}")
        return {crypto: self.prices.price(crypto, currency) for crypto in self.settings.cryptos}
