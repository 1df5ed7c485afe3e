"""The alternative buy and sell endpoints' use cases. They reuse the custodian flows' rules: a buy that
awaits the customer's fiat payment is a Staged buy, executing it commits or cancels it, and the sell status
update is the payout flow. Only what the requests name differs: the account stands for the customer, its
withdraw address for the destination, and the payment method for the fiat currency."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from application.commands import BuyRequest, SellRequest
from application.settlement import Settlement
from domain.errors import ValidationFailed
from domain.money import as_a_double_carries
from domain.transaction import Transaction

PAYMENT_SUCCESS = "PAYMENTSUCCESS"
PAYMENT_FAILURES = {"PAYMENTFAILED": "payment failed", "PAYMENTCANCELLED": "payment cancelled"}
SELL_STATUS_UPDATES = ("PayoutConfirming", "SellCompleted")


class AlternativeFlows(Settlement):
    def account_buy(
        self,
        partner: str,
        account_code: str,
        payment_method: str,
        amount: Decimal,
        currency: str | None,
        ip: str | None,
    ) -> BuyRequest:
        """The buy request of an account: its customer, crypto-currency and withdraw address; the currency is
        the payment method's unless given (and then must be the method's). `amount` is typed as a double by
        the interface, so it is read at the digits a double carries."""
        account = self.account(partner, account_code)
        method = self.settings.payment_methods.get(payment_method)
        return BuyRequest(
            customer_code=account.customer_code,
            currency=currency or (method.currency if method else ""),
            crypto=account.crypto,
            fiat_value=as_a_double_carries(amount),
            fiat_value_name="amount",
            destination_address=account.customer_address,
            payment_method=payment_method,
            account_code=account.code,
            customer_ip=ip,
        )

    def account_sell(
        self, partner: str, account_code: str, payment_method: str, crypto_amount: Decimal, ip: str | None
    ) -> SellRequest:
        account = self.account(partner, account_code)
        method = self.settings.payment_methods.get(payment_method)
        return SellRequest(
            customer_code=account.customer_code,
            account_code=account.code,
            currency=method.currency if method else "",
            crypto=account.crypto,
            payment_method=payment_method,
            crypto_amount=as_a_double_carries(crypto_amount),
            customer_ip=ip,
        )

    def execute(self, partner: str, code: str, result_code: str) -> Transaction:
        """The result of the customer's fiat payment for a buy that awaits it."""
        if result_code == PAYMENT_SUCCESS:
            return self.commit(partner, code)
        if result_code in PAYMENT_FAILURES:
            return self.cancel_staged(partner, code, PAYMENT_FAILURES[result_code])
        allowed = ", ".join([PAYMENT_SUCCESS, *PAYMENT_FAILURES])
        raise ValidationFailed(f"resultCode {result_code!r} is not one of {allowed}")

    def cancel_staged(self, partner: str, code: str, reason: str) -> Transaction:
        def cancel(transaction: Transaction, at: datetime) -> None:
            transaction.cancel(at, reason)

        return self.change_transaction(partner, code, cancel, release_limits=True)

    def update_sell_status(self, partner: str, code: str, status_code: str) -> Transaction:
        """PayoutConfirming is allowed from ToPayout; SellCompleted from ToPayout or PayoutConfirming."""
        if status_code == "PayoutConfirming":
            return self.confirm_payout(partner, code)
        if status_code == "SellCompleted":
            return self.pay_out(partner, code)
        raise ValidationFailed(f"statusCode {status_code!r} is not one of {', '.join(SELL_STATUS_UPDATES)}")
