from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, Response, get, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from interface.customers import presenters
from interface.customers import shapes as r
from interface.customers.shapes import AccountCreate, CustomerCreate, CustomerUpdate
from interface.http.dependencies import CustomersDep, LimitsDep, SettingsDep, principal
from interface.http.documented import IdempotencyKey, code_parameter, problems, version_header
from interface.http.request_writes import unit_of
from interface.http.security import AUDITOR, BROKER, authorize, roles
from interface.http.shapes import EXAMPLE_CUSTOMER
from interface.shared.query_parameters import moment, moment_of

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
        customers: CustomersDep,
        idempotency_key: IdempotencyKey,
    ) -> r.Customer:
        """Creates a customer, NEW unless `status` says ACTIVE."""
        customer = customers.register_customer(
            principal(request).partner,
            data.customer_code,
            data.trust_level,
            data.status,
            data.currency_code,
            data.portfolio_code,
            unit=unit_of(request),
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
        customers: CustomersDep,
        idempotency_key: IdempotencyKey,
    ) -> r.Customer:
        """Activates a NEW customer (status ACTIVE); activating an active customer changes nothing."""
        partner = principal(request).partner
        customer = customers.activate_customer(partner, customer_code, data.status, unit=unit_of(request))
        return presenters.customer(customer, customers.accounts_of(customer))

    @get("/{customer_code:str}", operation_id="getCustomer", responses=problems(404), sync_to_thread=True)
    def read(self, request: Request, customer_code: CodeParam, customers: CustomersDep) -> r.Customer:
        """Reads a customer with its accounts."""
        customer = customers.customer(principal(request).partner, customer_code)
        return presenters.customer(customer, customers.accounts_of(customer))

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
        customers: CustomersDep,
        idempotency_key: IdempotencyKey,
    ) -> Response[r.Account]:
        """Opens the account of a withdraw address (201), or returns the existing one (200)."""
        account, opened = customers.open_account(
            principal(request).partner,
            customer_code,
            data.customer_crypto_address,
            data.dc_code,
            unit=unit_of(request),
        )
        return Response(presenters.account(account), status_code=201 if opened else 200)

    @get(
        "/{customer_code:str}/limits",
        operation_id="getCustomerLimits",
        responses=problems(404),
        opt=roles(BROKER, AUDITOR),
        sync_to_thread=True,
    )
    def limits(
        self,
        request: Request,
        customer_code: CodeParam,
        customers: CustomersDep,
        limits: LimitsDep,
        settings: SettingsDep,
        as_of: Annotated[
            str | None, moment("asOf", "the limits as they stood then: the windows of that day and month")
        ] = None,
    ) -> r.Limits:
        """Limit, used and remaining volume per direction and period, in the base currency; with `asOf`, as
        they stood at that time (the windows of its UTC day and month, replayed from the event log up to it,
        by the ledger's clock as the history's `asOf`; 404 for a customer not registered yet then). Brokers
        and auditors."""
        partner = principal(request).partner
        at = moment_of("asOf", as_of)
        if at is not None:
            return presenters.limits(settings, *limits.usage_at(partner, customer_code, at))
        customer = customers.customer(partner, customer_code)
        return presenters.limits(settings, customer, limits.usage(partner, customer_code))
