"""Use cases of customers and their accounts."""

from __future__ import annotations

from application.context import Context
from application.request_checks import problems_of, refuse_all
from application.store.request_writes import RequestWrites
from domain.account import Account, account_code_for
from domain.customer import Customer, CustomerStatus
from domain.errors import (
    CryptoAddressInvalid,
    CryptoCodeRequired,
    CustomerAlreadyExists,
    DomainError,
    TrustLevelUnknown,
    ValidationFailed,
    quoted_text,
)


class Customers:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.store = context.store
        self.settings = context.settings

    def register_customer(
        self,
        partner: str,
        code: str,
        trust_level: str,
        status: str | None = None,
        currency: str | None = None,
        portfolio: str | None = None,
        *,
        unit: RequestWrites | None = None,
    ) -> Customer:
        """A new customer of the partner, saved within the request's `unit` of work; its code must be new."""
        refuse_all(self.registration_problems(trust_level, status, currency))
        status = status or CustomerStatus.NEW
        if self.store.find(Customer.create_id(partner, code)) is not None:
            raise CustomerAlreadyExists(f"a customer with customerCode {code!r} already exists")
        customer = Customer(
            partner=partner,
            code=code,
            trust_level=trust_level,
            status=CustomerStatus(status),
            currency=currency,
            portfolio=portfolio,
            at=self.context.clock.now(),
        )
        try:
            self.store.save(customer, unit=unit)
        except self.store.conflicts:
            raise CustomerAlreadyExists(f"a customer with customerCode {code!r} already exists") from None
        return customer

    def activate_customer(
        self, partner: str, code: str, status: str, *, unit: RequestWrites | None = None
    ) -> Customer:
        if status != CustomerStatus.ACTIVE:
            raise ValidationFailed(f"status must be ACTIVE to activate a customer, got {status!r}")
        for attempt in self.store.attempts():
            with attempt:
                customer = self.store.customer(partner, code)
                customer.activate(self.context.clock.now())
                self.store.save(customer, unit=unit)
                return customer

    def open_account(
        self,
        partner: str,
        customer_code: str,
        customer_address: str,
        crypto: str | None = None,
        *,
        unit: RequestWrites | None = None,
    ) -> tuple[Account, bool]:
        """The account for this address; `True` when it was opened now, `False` when it existed."""
        crypto = self._crypto_of(customer_address, crypto)
        code = account_code_for(partner, customer_code, crypto, customer_address)
        for attempt in self.store.attempts():
            with attempt:
                customer = self.store.customer(partner, customer_code)
                existing = self.store.find(Account.create_id(partner, code))
                if existing is not None:
                    return existing, False
                pool = self.store.address_pool(crypto)
                deposit = self.context.addresses.derive(crypto, pool.allocate(f"account:{partner}:{code}"))
                now = self.context.clock.now()
                account = Account(
                    partner=partner,
                    code=code,
                    customer_code=customer_code,
                    crypto=crypto,
                    customer_address=customer_address,
                    deposit_address=deposit.address,
                    deposit_path=deposit.path,
                    at=now,
                )
                customer.link_account(code, now)
                self.store.save(account, customer, pool, unit=unit)
                return account, True

    def customer(self, partner: str, code: str) -> Customer:
        """The partner's customer `code` (`CustomerNotFound` for an unknown code, and for another
        partner's)."""
        return self.store.customer(partner, code)

    def accounts_of(self, customer: Customer) -> list[Account]:
        return [self.store.account(customer.partner, code) for code in customer.account_codes]

    def registration_problems(
        self, trust_level: str | None, status: str | None, currency: str | None
    ) -> list[DomainError]:
        """Every problem of a new customer's own content, its codes judged against the settings (a field that
        is None was not given, or could not be read)."""
        return problems_of(
            lambda: trust_level is None or self._check_trust_level(trust_level),
            lambda: status is None or self._check_status(status),
            lambda: currency is None or self._check_currency(currency),
        )

    def _check_status(self, status: str) -> None:
        if status not in set(CustomerStatus):
            raise ValidationFailed(f"status must be NEW or ACTIVE, got {status!r}")

    def _check_currency(self, currency: str) -> None:
        if currency not in self.settings.currencies:
            known = ", ".join(sorted(self.settings.currencies))
            raise ValidationFailed(f"currencyCode {currency!r} is not supported; supported: {known}")

    def _check_trust_level(self, trust_level: str) -> None:
        if trust_level not in self.settings.trust_levels:
            known = ", ".join(sorted(self.settings.trust_levels))
            raise TrustLevelUnknown(f"trustLevel {trust_level!r} is not defined; known: {known}")

    def _crypto_of(self, address: str, crypto: str | None) -> str:
        """The crypto-currency of a customer's address: as given (and checked), or detected."""
        if crypto is not None:
            if crypto not in self.settings.cryptos:
                known = ", ".join(sorted(self.settings.cryptos))
                raise ValidationFailed(f"dcCode {crypto!r} is not supported; supported: {known}")
            if not self.context.addresses.is_valid(crypto, address):
                raise CryptoAddressInvalid(f"{quoted_text(address)} is not a valid {crypto} address")
            return crypto
        candidates = self.context.addresses.cryptos_for(address)
        if not candidates:
            raise CryptoAddressInvalid(
                f"{quoted_text(address)} is not a valid address of any supported crypto-currency "
                f"({', '.join(sorted(self.settings.cryptos))})"
            )
        if len(candidates) > 1:
            raise CryptoCodeRequired(
                f"{quoted_text(address)} is valid for {', '.join(candidates)}; give dcCode to choose one"
            )
        return candidates[0]
