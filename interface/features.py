"""The features the app serves, in the order their routes are registered: `create_app()`, the body checks
and the API document iterate this one list, so the HTTP edge (`interface/http/`) knows no feature. A new
feature is one line here (its folder's `FEATURE`, `interface.shared.feature.Feature`)."""

from __future__ import annotations

from interface import (
    alternative,
    audit,
    callbacks,
    chain,
    console,
    customers,
    events,
    health,
    prices,
    reconciliation,
    reserves,
    tokens,
    transactions,
)
from interface.shared.feature import Feature

FEATURES: list[Feature] = [
    health.FEATURE,
    tokens.FEATURE,
    customers.FEATURE,
    transactions.FEATURE,
    callbacks.FEATURE,
    events.FEATURE,
    chain.FEATURE,
    prices.FEATURE,
    reserves.FEATURE,
    reconciliation.FEATURE,
    audit.FEATURE,
    alternative.FEATURE,
    console.FEATURE,
]
