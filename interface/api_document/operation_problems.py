"""The `code` values each operation can answer, by status: what the document lists under its responses.

An operation's refusals are those of the shared machinery it goes through (malformed request, token and
role, api_version, text, idempotency, body size and validation, rate limit, database) and the rules of its
own use case, named here by their domain errors (whose kind gives the status). A response a handler
declares itself (`responses=` on the route, e.g. GET /health's 503) keeps its description, with the codes
listed here. tests/interface/test_problem_codes.py drives known refusals of every operation and checks each
against the document, and the schemathesis run checks every problem it meets.
"""

from __future__ import annotations

from domain import errors as e
from interface.http.problems import STATUS_OF_KIND

DomainErrors = tuple[type[e.DomainError], ...]

AMOUNT: DomainErrors = (e.AmountNotPositive, e.AmountTooPrecise)
QUOTE: DomainErrors = (
    *AMOUNT,
    e.ValidationFailed,
    e.CurrencyUnknown,
    e.CryptoUnknown,
    e.PaymentMethodUnknown,
    e.PaymentMethodMismatch,
    e.AmountTooSmall,
    e.RequestedPriceOutsideWiggleRoom,
    e.CallbackUrlRefused,
    e.PriceUnavailable,
)
TRADE: DomainErrors = (
    *QUOTE,
    e.CustomerNotFound,
    e.CustomerNotActive,
    e.AccountNotFound,
    e.AccountNotOfCustomer,
    e.AccountDoesNotFit,
    e.TrustLevelLimitExceeded,
    e.CryptoAddressInvalid,
    e.CryptoCodeRequired,
)
BUY: DomainErrors = TRADE
SELL: DomainErrors = (*TRADE, e.AmountChoiceInvalid)
MOVE_ON: DomainErrors = (
    e.ValidationFailed,
    e.TransactionNotFound,
    e.InvalidStateTransition,
    e.TransactionExpired,
    e.PayoutsFeatureDisabled,
)
RESERVES: DomainErrors = (
    *AMOUNT,
    e.ValidationFailed,
    e.AssetUnknown,
    e.ReserveTypeUnknown,
    e.ReserveTypeMismatch,
    e.ReserveCannotHoldAsset,
    e.ReserveAdjustmentShapeInvalid,
    e.ReserveMoveToSameReserve,
    e.ReserveAdjustmentConflict,
    e.InsufficientReserve,
)
DOMAIN_ERRORS: dict[str, DomainErrors] = {
    "createCustomer": (
        e.ValidationFailed,
        e.CustomerAlreadyExists,
        e.TrustLevelUnknown,
        e.CurrencyUnknown,
    ),
    "getCustomer": (e.CustomerNotFound,),
    "activateCustomer": (e.CustomerNotFound, e.InvalidStateTransition),
    "getCustomerLimits": (e.CustomerNotFound,),
    "createAccount": (
        e.ValidationFailed,
        e.CustomerNotFound,
        e.CryptoAddressInvalid,
        e.CryptoCodeRequired,
        e.CryptoUnknown,
    ),
    "getPrices": (e.CurrencyNotFound, e.PriceUnavailable),
    "simulateBrokerBuy": BUY,
    "createBrokerBuy": BUY,
    "simulateBrokerSell": SELL,
    "createBrokerSell": SELL,
    "simulateAccountBuy": BUY,
    "createAccountBuy": BUY,
    "createAccountSell": SELL,
    "commitTransaction": (*MOVE_ON, e.TransactionNotStaged),
    "executeTransaction": (*MOVE_ON, e.TransactionNotStaged),
    "payout": MOVE_ON,
    "confirmPayout": MOVE_ON,
    "updateSellStatus": MOVE_ON,
    "reportDeposit": (
        *AMOUNT,
        e.ValidationFailed,
        e.CryptoUnknown,
        e.DepositAddressUnknown,
        e.ChainReportConflict,
    ),
    "reportSendout": (
        e.ValidationFailed,
        e.TransactionNotFound,
        e.ChainReportConflict,
        e.InvalidStateTransition,
    ),
    "getTransaction": (e.TransactionNotFound,),
    "getTransactionHistory": (e.TransactionNotFound,),
    "listTransactionCallbacks": (e.TransactionNotFound,),
    "createReserveAdjustment": RESERVES,
}
# Codes beyond the shared machinery's and the domain's: the token endpoint's own (RFC 6749 5.2), and
# GET /health's stalled projections or committer, a list the read models cannot answer completely yet, a
# partner's heavy reads all running (`interface/http/heavy_reads.py`), a reconciliation's period too long.
OWN_CODES: dict[str, dict[int, list[str]]] = {
    "issueToken": {
        400: ["invalid_request", "unsupported_grant_type", "invalid_scope"],
        401: ["invalid_client"],
        429: ["too_many_failed_attempts", "secret_checks_busy"],
    },
    "health": {503: ["projection_stalled", "committer_stalled", "database_read_only"]},
    "listTransactions": {429: ["heavy_reads_busy"], 503: ["read_model_behind"]},
    "getReserves": {429: ["heavy_reads_busy"], 503: ["read_model_behind"]},
    "getReconciliation": {422: ["period_too_long"], 429: ["heavy_reads_busy"], 503: ["read_model_behind"]},
}
# Operations that never reach the database (liveness answers while it is down) or no token check.
NO_DATABASE = {"liveness"}


def domain_codes(operation_id: str) -> dict[int, list[str]]:
    """The codes of the operation's own rules, by status."""
    codes: dict[int, list[str]] = {}
    for status, more in OWN_CODES.get(operation_id, {}).items():
        codes.setdefault(status, []).extend(more)
    for error in DOMAIN_ERRORS.get(operation_id, ()):
        listed = codes.setdefault(STATUS_OF_KIND[error.kind], [])
        if error.code not in listed:
            listed.append(error.code)
    return codes
