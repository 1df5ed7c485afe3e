"""Customers, their accounts and their limits over HTTP: routes, shapes and presenters, and `FEATURE`, what
the app lists of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from application.use_cases import UseCases
from domain import errors as e
from interface.customers import shapes
from interface.customers.routes import CustomerController
from interface.customers.shapes import CustomerCreate
from interface.shared.feature import Feature


def _customer(
    use_cases: UseCases, _: str, fields: Mapping[str, Any], unread: frozenset[str]
) -> list[e.DomainError]:
    return use_cases.customers.registration_problems(
        fields.get("trustLevel"), fields.get("status"), fields.get("currencyCode")
    )


FEATURE = Feature(
    name="customers",
    route_handlers=[CustomerController],
    body_checks={CustomerCreate: _customer},
    problem_codes={
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
    },
    shapes=[shapes],
)
