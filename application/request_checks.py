"""The checks of a buy or sell request's own content, field by field, every problem at once.

A request is judged first by what it says: amounts above zero and exact at their asset's scale (a requested
price, fiat per unit of crypto that becomes the executed price, at its currency's minor unit, the scale
answers write `cryptoPrice` at), codes the settings know, a payment method that fits the direction and
currency, a valid destination address, an acceptable callback URL, one of fiatValue and cryptoAmount for a
sell. These checks read nothing recorded, so they run before any check of the customer, account or limits,
and they list every problem they find, each named as the client sent the field. The interface runs them on
what it could read of a body that also broke its schema, so one answer lists both kinds of problems.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from application.commands import BuyRequest, SellRequest
from application.ports import AddressBook, CallbackUrlCheck
from application.settings import Direction, Settings
from domain.callback_urls import CallbackUrl
from domain.errors import (
    AmountChoiceInvalid,
    AmountTooPrecise,
    CallbackUrlRefused,
    CryptoAddressInvalid,
    CryptoUnknown,
    CurrencyUnknown,
    DomainError,
    PaymentMethodMismatch,
    PaymentMethodUnknown,
    ValidationFailed,
    quoted_text,
)
from domain.money import Asset
from domain.pricing import check_amount

# How the custodian endpoints name each field of a request (the alternative endpoints name some otherwise).
CUSTODIAN_NAMES: Mapping[str, str] = {
    "currency": "currencyCode",
    "crypto": "cryptoCode",
    "payment_method": "paymentMethodCode",
    "fiat_value": "fiatValue",
    "crypto_amount": "cryptoAmount",
    "requested_price": "requestedPrice",
    "destination_address": "destinationAddress",
    "callback_url": "callbackUrl",
}
# An amount judged without its asset (the currency is unknown or was not readable): whole units only, and a
# fraction is then not counted as a problem, since the asset's scale is not known.
WHOLE_UNITS = Asset("", 0)


@dataclass(frozen=True)
class Draft:
    """A buy or sell request as far as it could be read. A field that is None was not given, or was given in
    a form the schema refused; `unread` holds the latter (and required fields left out), which are already
    reported, so no check here judges them again or reports what follows from their absence."""

    direction: Direction
    names: Mapping[str, str] = field(default_factory=lambda: CUSTODIAN_NAMES)
    currency: str | None = None
    crypto: str | None = None
    payment_method: str | None = None
    fiat_value: Decimal | None = None
    crypto_amount: Decimal | None = None
    requested_price: Decimal | None = None
    destination_address: str | None = None
    callback_url: str | None = None
    unread: frozenset[str] = frozenset()

    @classmethod
    def read(
        cls,
        direction: Direction,
        fields: Mapping[str, Any],
        unread: Collection[str] = (),
        names: Mapping[str, str] = CUSTODIAN_NAMES,
    ) -> Draft:
        """From a body's fields under the names the client sent them (`unread` by those names too)."""
        return cls(
            direction=direction,
            names=names,
            unread=frozenset(own for own, sent in names.items() if sent in unread),
            **{own: fields[sent] for own, sent in names.items() if sent in fields},
        )

    @classmethod
    def of_buy(cls, request: BuyRequest) -> Draft:
        return cls(
            direction=Direction.BUY,
            names={**CUSTODIAN_NAMES, "fiat_value": request.fiat_value_name},
            currency=request.currency,
            crypto=request.crypto,
            payment_method=request.payment_method,
            fiat_value=request.fiat_value,
            requested_price=request.requested_price,
            destination_address=request.destination_address,
            callback_url=request.callback_url,
        )

    @classmethod
    def of_sell(cls, request: SellRequest) -> Draft:
        return cls(
            direction=Direction.SELL,
            currency=request.currency,
            crypto=request.crypto,
            payment_method=request.payment_method,
            fiat_value=request.fiat_value,
            crypto_amount=request.crypto_amount,
            requested_price=request.requested_price,
            callback_url=request.callback_url,
        )


def problems_of(*checks: Callable[[], object]) -> list[DomainError]:
    """The problems of `checks`, each a check that raises its refusal, run one after the other: every
    problem is listed, where raising would stop at the first (see `refusal`)."""
    found: list[DomainError] = []
    for check in checks:
        try:
            check()
        except DomainError as problem:
            found.append(problem)
    return found


def refuse_all(problems: list[DomainError]) -> None:
    """Raises one refusal listing every problem, if there is any (`refusal`)."""
    refused = refusal(problems)
    if refused is not None:
        raise refused


def refusal(problems: list[DomainError]) -> DomainError | None:
    """One refusal listing every problem, one line each. Its `code` is the problems' code when they all
    have the same one, else `validation_failed` (a client acting on `code` is never told of one problem
    while others stand); None when there is no problem."""
    if len(problems) <= 1:
        return problems[0] if problems else None
    lines = [line for problem in problems for line in problem.errors]
    same_code = len({problem.code for problem in problems}) == 1
    kind = type(problems[0]) if same_code else ValidationFailed
    return kind("; ".join(lines), lines)


class RequestChecks:
    def __init__(
        self, settings: Settings, callback_urls: CallbackUrlCheck, addresses: AddressBook | None = None
    ) -> None:
        self.settings = settings
        self.callback_urls = callback_urls
        self.addresses = addresses
        self._accepted: dict[str, CallbackUrl] = {}

    def problems(self, draft: Draft) -> list[DomainError]:
        """Every problem of the request's own content, in the order of the fields."""
        return [
            *self._codes(draft),
            *self._payment_method(draft),
            *self._amounts(draft),
            *self._destination(draft),
            *self._callback_url(draft),
        ]

    def refuse(self, draft: Draft) -> None:
        """Raises one refusal listing every problem of the request's content, if it has any."""
        refused = refusal(self.problems(draft))
        if refused is not None:
            raise refused

    def accept_callback_url(self, url: str) -> CallbackUrl:
        """The callback URL checked now (DNS included), once per URL for the checks of one request."""
        if url not in self._accepted:
            self._accepted[url] = self.callback_urls.accept(url)
        return self._accepted[url]

    def _codes(self, draft: Draft) -> Iterator[DomainError]:
        names = draft.names
        if draft.currency is not None and draft.currency not in self.settings.currencies:
            known = ", ".join(sorted(self.settings.currencies))
            yield CurrencyUnknown(
                f"{names['currency']} {draft.currency!r} is not supported; supported: {known}"
            )
        if draft.crypto is not None and draft.crypto not in self.settings.cryptos:
            known = ", ".join(sorted(self.settings.cryptos))
            yield CryptoUnknown(f"{names['crypto']} {draft.crypto!r} is not supported; supported: {known}")

    def _payment_method(self, draft: Draft) -> Iterator[DomainError]:
        code = draft.payment_method
        if code is None:
            return
        method = self.settings.payment_methods.get(code)
        if method is None:
            known = ", ".join(sorted(self.settings.payment_methods))
            yield PaymentMethodUnknown(
                f"{draft.names['payment_method']} {code!r} is not defined; known: {known}"
            )
            return
        if method.direction != draft.direction:
            yield PaymentMethodMismatch(
                f"payment method {code} is for {method.direction}s, not for {draft.direction}s"
            )
        currency, name = draft.currency, draft.names["currency"]
        if currency in self.settings.currencies and method.currency != currency:
            yield PaymentMethodMismatch(
                f"payment method {code} pays in {method.currency}, but {name} is {currency}"
            )

    def _amounts(self, draft: Draft) -> Iterator[DomainError]:
        names = draft.names
        fiat = self.settings.fiat(draft.currency) if draft.currency in self.settings.currencies else None
        crypto = self.settings.crypto_asset(draft.crypto) if draft.crypto in self.settings.cryptos else None
        if draft.fiat_value is not None:
            yield from _amount(draft.fiat_value, fiat, names["fiat_value"])
        if draft.crypto_amount is not None:
            yield from _amount(draft.crypto_amount, crypto, names["crypto_amount"])
        if draft.requested_price is not None:  # fiat per unit of crypto: at the currency's minor unit
            yield from _amount(draft.requested_price, fiat, names["requested_price"])
        amounts = (draft.fiat_value, draft.crypto_amount)
        readable = not {"fiat_value", "crypto_amount"} & draft.unread
        if draft.direction == Direction.SELL and readable and (amounts[0] is None) == (amounts[1] is None):
            yield AmountChoiceInvalid(
                f"give exactly one of {names['fiat_value']} (the payout wanted) and "
                f"{names['crypto_amount']} (the crypto to sell), not both and not neither"
            )

    def _destination(self, draft: Draft) -> Iterator[DomainError]:
        address, crypto = draft.destination_address, draft.crypto
        if address is None or self.addresses is None or crypto not in self.settings.cryptos:
            return
        if not self.addresses.is_valid(crypto, address):
            name = draft.names["destination_address"]
            yield CryptoAddressInvalid(f"{name} {quoted_text(address)} is not a valid {crypto} address")

    def _callback_url(self, draft: Draft) -> Iterator[DomainError]:
        if draft.callback_url is None:
            return
        try:
            self.accept_callback_url(draft.callback_url)
        except CallbackUrlRefused as refused:
            yield refused


def _amount(amount: Decimal, asset: Asset | None, name: str) -> Iterator[DomainError]:
    """The amount rules of `domain.pricing.check_amount`; without the asset, all but its scale."""
    try:
        check_amount(asset or WHOLE_UNITS, amount, name)
    except AmountTooPrecise as refused:
        if asset is not None:
            yield refused
    except DomainError as refused:
        yield refused
