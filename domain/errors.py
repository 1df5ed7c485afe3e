"""Named domain errors: one class and one stable code per rule.

The domain says what kind of refusal an error is, never how a transport reports it: the interface maps the
kind to an HTTP status.
"""

from __future__ import annotations

from enum import StrEnum

QUOTED_TEXT = 96  # characters of a client's text that a refusal quotes at most


def quoted_text(text: str) -> str:
    """A client's text as a refusal quotes it (repr): whole up to QUOTED_TEXT characters (any address or
    code fits), else its start and its length, so that a refusal never repeats kilobytes of a request."""
    if len(text) <= QUOTED_TEXT:
        return repr(text)
    return f"{text[:QUOTED_TEXT]!r}... ({len(text)} characters)"


class Refusal(StrEnum):
    INVALID = "invalid"  # the request breaks a rule about its own content
    NOT_FOUND = "not_found"  # a named object does not exist (for this partner)
    CONFLICT = "conflict"  # the object exists, or its state does not allow the command
    UNAVAILABLE = "unavailable"  # a dependency (such as the price source) cannot answer now


class DomainError(Exception):
    """A command was refused. `code` is stable; `errors` lists one human-readable line per problem.

    `judges_request_only` says the refusal judged the request alone (its content against the rules and the
    settings), not anything recorded nor the market: sent again unchanged it is refused again, so nothing
    about it needs keeping, and a corrected request may follow as if this one had never been sent."""

    code = "domain_error"
    kind = Refusal.INVALID
    title = "The request was refused"
    judges_request_only = False

    def __init__(self, detail: str, errors: list[str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors if errors is not None else [detail]


def _error(name: str, code: str, kind: Refusal, title: str) -> type[DomainError]:
    return type(name, (DomainError,), {"code": code, "kind": kind, "title": title})


def _request_error(name: str, code: str, title: str) -> type[DomainError]:
    """An INVALID refusal that judges the request alone (see `DomainError.judges_request_only`)."""
    attributes = {"code": code, "kind": Refusal.INVALID, "title": title, "judges_request_only": True}
    return type(name, (DomainError,), attributes)


ValidationFailed = _request_error("ValidationFailed", "validation_failed", "Invalid request")
# The account a buy or sell names (or finds by its address) does not fit the request: the same code as
# ValidationFailed, but judged against what is recorded.
AccountDoesNotFit = _error("AccountDoesNotFit", "validation_failed", Refusal.INVALID, "Invalid request")
IdempotencyKeyReused = _error(
    "IdempotencyKeyReused", "idempotency_key_reused", Refusal.INVALID, "Idempotency-Key reused"
)
CustomerNotFound = _error("CustomerNotFound", "customer_not_found", Refusal.NOT_FOUND, "Customer not found")
CustomerAlreadyExists = _error(
    "CustomerAlreadyExists", "customer_already_exists", Refusal.CONFLICT, "Customer already exists"
)
CustomerNotActive = _error(
    "CustomerNotActive", "customer_not_active", Refusal.INVALID, "Customer is not active"
)
TrustLevelUnknown = _request_error("TrustLevelUnknown", "trust_level_unknown", "Unknown trust level")
TrustLevelLimitExceeded = _error(
    "TrustLevelLimitExceeded",
    "trust_level_limit_exceeded",
    Refusal.INVALID,
    "Trust level limit exceeded",
)
AccountNotFound = _error("AccountNotFound", "account_not_found", Refusal.NOT_FOUND, "Account not found")
AccountNotOfCustomer = _error(
    "AccountNotOfCustomer",
    "account_not_of_customer",
    Refusal.INVALID,
    "Account belongs to another customer",
)
CryptoAddressInvalid = _request_error(
    "CryptoAddressInvalid", "crypto_address_invalid", "Invalid crypto address"
)
CryptoCodeRequired = _request_error(
    "CryptoCodeRequired", "crypto_code_required", "Crypto-currency code required"
)
CryptoUnknown = _request_error("CryptoUnknown", "crypto_currency_unknown", "Unknown crypto-currency")
CurrencyUnknown = _request_error("CurrencyUnknown", "currency_unknown", "Unknown currency")
CurrencyNotFound = _error("CurrencyNotFound", "currency_not_found", Refusal.NOT_FOUND, "Unknown currency")
PaymentMethodUnknown = _request_error(
    "PaymentMethodUnknown", "payment_method_unknown", "Unknown payment method"
)
PaymentMethodMismatch = _request_error(
    "PaymentMethodMismatch", "payment_method_mismatch", "Payment method does not fit the transaction"
)
AmountNotPositive = _request_error("AmountNotPositive", "amount_not_positive", "Amount must be positive")
AmountTooPrecise = _request_error("AmountTooPrecise", "amount_too_precise", "Amount has too many decimals")
AmountTooSmall = _error(
    "AmountTooSmall", "amount_below_fees", Refusal.INVALID, "Amount does not cover the fees"
)
AmountChoiceInvalid = _request_error(
    "AmountChoiceInvalid",
    "fiat_value_or_crypto_amount_required",
    "Give exactly one of fiatValue and cryptoAmount",
)
RequestedPriceOutsideWiggleRoom = _error(
    "RequestedPriceOutsideWiggleRoom",
    "requested_price_outside_wiggle_room",
    Refusal.INVALID,
    "Requested price outside the wiggle room",
)
TransactionNotFound = _error(
    "TransactionNotFound", "transaction_not_found", Refusal.NOT_FOUND, "Transaction not found"
)
TransactionNotStaged = _error(
    "TransactionNotStaged", "transaction_not_staged", Refusal.CONFLICT, "Transaction is not staged"
)
TransactionExpired = _error(
    "TransactionExpired", "transaction_expired", Refusal.CONFLICT, "Transaction has expired"
)
InvalidStateTransition = _error(
    "InvalidStateTransition",
    "invalid_state_transition",
    Refusal.CONFLICT,
    "Invalid state transition",
)
PayoutsFeatureDisabled = _error(
    "PayoutsFeatureDisabled",
    "payouts_feature_disabled",
    Refusal.CONFLICT,
    "Payouts feature disabled",
)
DepositAddressUnknown = _error(
    "DepositAddressUnknown",
    "deposit_address_unknown",
    Refusal.NOT_FOUND,
    "Deposit address not found",
)
ChainReportConflict = _error(
    "ChainReportConflict",
    "chain_report_conflict",
    Refusal.CONFLICT,
    "Chain report conflicts with an earlier one",
)
PriceUnavailable = _error("PriceUnavailable", "price_unavailable", Refusal.UNAVAILABLE, "Price unavailable")
AssetUnknown = _request_error("AssetUnknown", "asset_unknown", "Unknown currency or crypto-currency")
ReserveTypeUnknown = _request_error("ReserveTypeUnknown", "reserve_type_unknown", "Unknown reserve type")
ReserveTypeMismatch = _error(
    "ReserveTypeMismatch", "reserve_type_mismatch", Refusal.INVALID, "Reserve has another type"
)
ReserveCannotHoldAsset = _request_error(
    "ReserveCannotHoldAsset", "reserve_cannot_hold_asset", "Reserve of this type cannot hold this asset"
)
ReserveAdjustmentShapeInvalid = _request_error(
    "ReserveAdjustmentShapeInvalid",
    "reserve_adjustment_shape_invalid",
    "Reserve adjustment names the wrong reserves for its kind",
)
ReserveMoveToSameReserve = _request_error(
    "ReserveMoveToSameReserve", "reserve_move_to_same_reserve", "A move needs two different reserves"
)
ReserveAdjustmentConflict = _error(
    "ReserveAdjustmentConflict",
    "reserve_adjustment_conflict",
    Refusal.CONFLICT,
    "Reserve adjustment code already used for another adjustment",
)
InsufficientReserve = _error(
    "InsufficientReserve",
    "insufficient_reserve",
    Refusal.CONFLICT,
    "Reserve holds less than the move asks",
)
CallbackUrlRefused = _request_error("CallbackUrlRefused", "callback_url_refused", "Callback URL refused")
