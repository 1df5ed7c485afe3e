from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, Response, get, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from interface import presenters
from interface.controllers.common import (
    IdempotencyKey,
    LedgerDep,
    code_parameter,
    principal,
    problems,
    version_header,
)
from interface.schemas import responses as r
from interface.schemas.base import EXAMPLE_CUSTOMER
from interface.schemas.requests import AccountCreate, CustomerCreate, CustomerUpdate
from interface.security import BROKER, authorize, roles

CodeParam = Annotated[str, code_parameter("the customer's code", EXAMPLE_CUSTOMER)]


class CustomerController(Controller):
    path = "/customer"
    tags = ["Customers"]
    guards = [authorize]
    opt = roles(BROKER)
    parameters = version_header()

    @post(
        "/", operation_id="createCustomer", status_code=201, responses=problems(409, 422), sync_to_thread=True
    )
    def create(
        self,
        request: Request,
        data: JSONBody[CustomerCreate],
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> r.Customer:
        """Creates a customer, NEW unless `status` says ACTIVE."""
        customer = ledger.register_customer(
            principal(request).partner,
            data.customer_code,
            data.trust_level,
            data.status,
            data.currency_code,
            data.portfolio_code,
        )
        return presenters.customer(customer, [])

    @put(
        "/{customer_code:str}",
        operation_id="activateCustomer",
        responses=problems(404, 409, 422),
        sync_to_thread=True,
    )
    def activate(
        self,
        request: Request,
        customer_code: CodeParam,
        data: JSONBody[CustomerUpdate],
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> r.Customer:
        """Activates a NEW customer (status ACTIVE); activating an active customer changes nothing."""
        partner = principal(request).partner
        customer = ledger.activate_customer(partner, customer_code, data.status)
        return presenters.customer(customer, ledger.accounts_of(customer))

    @get("/{customer_code:str}", operation_id="getCustomer", responses=problems(404), sync_to_thread=True)
    def read(self, request: Request, customer_code: CodeParam, ledger: LedgerDep) -> r.Customer:
        """Reads a customer with its accounts."""
        customer = ledger.customer(principal(request).partner, customer_code)
        return presenters.customer(customer, ledger.accounts_of(customer))

    @post(
        "/{customer_code:str}/accounts",
        operation_id="createAccount",
        status_code=201,
        responses={
            200: ResponseSpec(r.Account, description="The account of this address existed already"),
            **problems(404, 422),
        },
        sync_to_thread=True,
    )
    def open_account(
        self,
        request: Request,
        customer_code: CodeParam,
        data: JSONBody[AccountCreate],
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> Response[r.Account]:
        """Opens the account of a withdraw address (201), or returns the existing one (200)."""
        account, opened = ledger.open_account(
            principal(request).partner, customer_code, data.customer_crypto_address, data.dc_code
        )
        return Response(presenters.account(account), status_code=201 if opened else 200)

    @get(
        "/{customer_code:str}/limits",
        operation_id="getCustomerLimits",
        responses=problems(404),
        sync_to_thread=True,
    )
    def limits(self, request: Request, customer_code: CodeParam, ledger: LedgerDep) -> r.Limits:
        """Limit, used and remaining volume per direction and period, in the base currency."""
        partner = principal(request).partner
        customer = ledger.customer(partner, customer_code)
        return presenters.limits(ledger.settings, customer, ledger.limits(partner, customer_code))
