"""`UseCases`: every use case of the ledger, composed once on one `Ledger` and the adapters.

| use cases                                             | module                    |
|-------------------------------------------------------|---------------------------|
| customers, accounts                                   | `application.customers`   |
| trust-level limits                                    | `application.limits`      |
| buys: simulate, create, commit                        | `application.buys`        |
| sells: simulate, create                               | `application.sells`       |
| chain reports, payouts, expiry of one                 | `application.settlement`  |
| the operator's resolutions: accept, refund            | `application.resolutions` |
| the alternative endpoints' flows                      | `application.alternative` |
| reserve adjustments                                   | `application.reserves`    |
| a transaction, its history, its state at a time       | `application.history`     |
| a request's checks, its priced order; prices (`desk`) | `application.orders`      |

The composition root (`interface.app.build_runtime`) builds the bundle once; each route is handed the use
case of its feature by dependency injection and calls it directly, and the expiry sweeper
(`application.sweeper`) calls the settlement's `expire`. A use case that writes takes the request's writes
(`unit=`, a `RequestWrites`, `application.store.request_writes`), which the interface opens and the store
joins; without a request (the command line, tests) it is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from application.alternative import AlternativeFlows
from application.buys import Buys
from application.changes import TransactionChanges
from application.context import Context
from application.customers import Customers
from application.history import History
from application.ledger import Ledger
from application.limits import Limits
from application.orders import OrderDesk
from application.ports import AddressBook, CallbackUrlCheck, PriceSource
from application.reserves import Reserves
from application.resolutions import Resolutions
from application.sells import Sells
from application.settlement import Settlement


@dataclass(frozen=True)
class UseCases:
    ledger: Ledger  # the event-sourced application they run on, with its store, settings and clock
    context: Context
    customers: Customers
    limits: Limits
    buys: Buys
    sells: Sells
    settlement: Settlement
    resolutions: Resolutions
    alternative: AlternativeFlows
    reserves: Reserves
    history: History

    @classmethod
    def of(
        cls,
        ledger: Ledger,
        prices: PriceSource,
        addresses: AddressBook,
        callback_urls: CallbackUrlCheck | None = None,
    ) -> UseCases:
        """The use cases on `ledger`'s store, settings and clock, with the adapters to the world (without
        `callback_urls`, requested callback URLs get the static rules only)."""
        context = Context(ledger.store, ledger.settings, prices, addresses, ledger.clock, callback_urls)
        limits = Limits(context)
        changes = TransactionChanges(context, limits)
        buys = Buys(context, limits)
        settlement = Settlement(context, changes)
        return cls(
            ledger=ledger,
            context=context,
            customers=Customers(context),
            limits=limits,
            buys=buys,
            sells=Sells(context, limits),
            settlement=settlement,
            resolutions=Resolutions(context, limits),
            alternative=AlternativeFlows(context, buys, settlement, changes),
            reserves=Reserves(context),
            history=History(ledger.store),
        )

    @property
    def desk(self) -> OrderDesk:
        """A new order desk: a request's own checks, its priced order, and the price lists."""
        return self.context.new_desk()
