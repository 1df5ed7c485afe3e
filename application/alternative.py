"""The alternative buy and sell endpoints' use cases. They reuse the custodian flows' rules: a buy that
awaits the customer's fiat payment is a Staged buy, executing it commits or cancels it, and the sell status
update is the payout flow. Only what the requests name differs: the account stands for the customer, its
withdraw address for the destination, and the payment method for the fiat currency."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from application.buys import Buys
from application.changes import TransactionChanges
from application.commands import BuyRequest, SellRequest
from application.context import Context
from application.request_checks import CUSTODIAN_NAMES, Draft
from application.settings import Direction
from application.settlement import Settlement
from application.store.request_writes import RequestWrites
from domain.account import Account
from domain.errors import ValidationFailed
from domain.money import as_a_double_carries
from domain.transaction import Transaction

PAYMENT_SUCCESS = "PAYMENTSUCCESS"
PAYMENT_FAILURES = {"PAYMENTFAILED": "payment failed", "PAYMENTCANCELLED": "payment cancelled"}
SELL_STATUS_UPDATES = ("PayoutConfirming", "SellCompleted")
# What the alternative bodies call the fields they share with the custodian ones.
ACCOUNT_BUY_NAMES = {**CUSTODIAN_NAMES, "currency": "currency", "fiat_value": "amount"}
ACCOUNT_SELL_NAMES = CUSTODIAN_NAMES


class AlternativeFlows:
    def __init__(
        self, context: Context, buys: Buys, settlement: Settlement, changes: TransactionChanges
    ) -> None:
        self.context = context
        self.store = context.store
        self.buys = buys
        self.settlement = settlement
        self.changes = changes

    def account_buy_draft(self, fields: Mapping[str, Any], unread: Collection[str] = ()) -> Draft:
        """What an account buy's body says (its fields by the client's names), for the checks of its content:
        `amount` read at the digits a double carries (the interface types it as a double), the currency the
        payment method's unless given."""
        draft = Draft.read(Direction.BUY, fields, unread, ACCOUNT_BUY_NAMES)
        method = self.context.settings.payment_methods.get(draft.payment_method or "")
        currency = draft.currency
        if currency is None and "currency" not in draft.unread and method is not None:
            currency = method.currency
        return replace(draft, currency=currency, fiat_value=_as_a_double(draft.fiat_value))

    def account_sell_draft(
        self, partner: str, fields: Mapping[str, Any], unread: Collection[str] = ()
    ) -> Draft:
        """What an account sell's body says: its crypto-currency is the account's (if it exists), its currency
        the payment method's, `cryptoAmount` read at the digits a double carries."""
        draft = Draft.read(Direction.SELL, fields, unread, ACCOUNT_SELL_NAMES)
        method = self.context.settings.payment_methods.get(draft.payment_method or "")
        code = fields.get("accountCode")
        account = self.store.find(Account.create_id(partner, code)) if isinstance(code, str) else None
        return replace(
            draft,
            currency=method.currency if method else None,
            crypto=account.crypto if isinstance(account, Account) else None,
            crypto_amount=_as_a_double(draft.crypto_amount),
        )

    def account_buy(
        self,
        partner: str,
        account_code: str,
        payment_method: str,
        amount: Decimal,
        currency: str | None,
        ip: str | None,
    ) -> BuyRequest:
        """The buy request of an account: its customer, crypto-currency and withdraw address. The request's
        own content is judged first (every problem at once), then the account must exist."""
        fields = {"accountCode": account_code, "paymentMethodCode": payment_method, "amount": amount}
        draft = self.account_buy_draft({**fields, "currency": currency} if currency else fields)
        self.context.new_desk().checks.refuse(draft)
        account = self.store.account(partner, account_code)
        return BuyRequest(
            customer_code=account.customer_code,
            currency=draft.currency or "",
            crypto=account.crypto,
            fiat_value=draft.fiat_value or amount,
            fiat_value_name="amount",
            destination_address=account.customer_address,
            payment_method=payment_method,
            account_code=account.code,
            customer_ip=ip,
        )

    def account_sell(
        self, partner: str, account_code: str, payment_method: str, crypto_amount: Decimal, ip: str | None
    ) -> SellRequest:
        fields = {
            "accountCode": account_code,
            "paymentMethodCode": payment_method,
            "cryptoAmount": crypto_amount,
        }
        draft = self.account_sell_draft(partner, fields)
        self.context.new_desk().checks.refuse(draft)
        account = self.store.account(partner, account_code)
        return SellRequest(
            customer_code=account.customer_code,
            account_code=account.code,
            currency=draft.currency or "",
            crypto=account.crypto,
            payment_method=payment_method,
            crypto_amount=draft.crypto_amount or crypto_amount,
            customer_ip=ip,
        )

    def execute(
        self, partner: str, code: str, result_code: str, *, unit: RequestWrites | None = None
    ) -> Transaction:
        """The result of the customer's fiat payment for a buy that awaits it."""
        if result_code == PAYMENT_SUCCESS:
            return self.buys.commit(partner, code, unit=unit)
        if result_code in PAYMENT_FAILURES:
            return self.cancel_staged(partner, code, PAYMENT_FAILURES[result_code], unit=unit)
        allowed = ", ".join([PAYMENT_SUCCESS, *PAYMENT_FAILURES])
        raise ValidationFailed(f"resultCode {result_code!r} is not one of {allowed}")

    def cancel_staged(
        self, partner: str, code: str, reason: str, *, unit: RequestWrites | None = None
    ) -> Transaction:
        def cancel(transaction: Transaction, at: datetime) -> None:
            transaction.cancel(at, reason)

        return self.changes.apply(partner, code, cancel, release_limits=True, unit=unit)

    def update_sell_status(
        self, partner: str, code: str, status_code: str, *, unit: RequestWrites | None = None
    ) -> Transaction:
        """PayoutConfirming is allowed from ToPayout; SellCompleted from ToPayout or PayoutConfirming."""
        if status_code == "PayoutConfirming":
            return self.settlement.confirm_payout(partner, code, unit=unit)
        if status_code == "SellCompleted":
            return self.settlement.pay_out(partner, code, unit=unit)
        raise ValidationFailed(f"statusCode {status_code!r} is not one of {', '.join(SELL_STATUS_UPDATES)}")


def _as_a_double(amount: Decimal | None) -> Decimal | None:
    return None if amount is None else as_a_double_carries(amount)
