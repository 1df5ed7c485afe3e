"""The domain errors a quote, a trade and a move of a transaction can refuse with: the refusals that the
operations of several features share (a buy by the broker's or the account-based endpoint, a payout by the
custodian's or the account-based one), named once. Each feature's description lists its operations' own
(`interface.shared.feature.Feature.problem_codes`)."""

from __future__ import annotations

from domain import errors as e

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
