"""Callback URLs over HTTP, judged by their address (issue 11, item 5): an IPv6 address that carries a private
IPv4 address or lies outside the global unicast space is refused with 422 `callback_url_refused`, and the
refused request records nothing. No address here is ever connected to: the server refuses each as given,
before any lookup."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.e2e.support import Api, Customer, buy_body, expect, expect_problem, limits_used, sell_body
from tests.unit.test_callback_urls import NON_GLOBAL_IPV6

REFUSED = "callback_url_refused"


def recorded_transactions(api: Api, customer: Customer) -> int:
    page = expect(api.get("/transactions/custodian", params={"customerCode": customer.code}), 200)
    return page["total"]


def test_a_buy_with_an_ipv6_form_of_loopback_as_callback_url_is_refused_and_records_nothing(
    broker: Api, customer: Customer
) -> None:
    before = limits_used(broker, customer.code)

    response = broker.post_json("/brokerbuy", buy_body(customer, 20, callbackUrl="https://[::7f00:1]/hook"))

    problem = expect_problem(response, 422, REFUSED)
    assert "::7f00:1 (an IPv6 form of 127.0.0.1) is not a public address" in problem["detail"]
    assert recorded_transactions(broker, customer) == 0
    assert limits_used(broker, customer.code) == before


@pytest.mark.parametrize("address", NON_GLOBAL_IPV6)
def test_a_buy_or_sell_with_a_non_global_ipv6_callback_address_is_refused_and_records_nothing(
    broker: Api, customer: Customer, address: str
) -> None:
    url = f"https://[{address}]/hook"
    for path, body in (
        ("/brokerbuy", buy_body(customer, 20, callbackUrl=url)),
        ("/paymentrequest/brokersell", sell_body(customer, cryptoAmount=Decimal("0.0002"), callbackUrl=url)),
    ):
        expect_problem(broker.post_json(path, body), 422, REFUSED)
    assert recorded_transactions(broker, customer) == 0


def test_the_listing_that_shows_nothing_recorded_does_show_a_recorded_buy(
    broker: Api, customer: Customer
) -> None:
    """So that "records nothing" above is not vacuous (the buy has no callback: no delivery is attempted)."""
    created = expect(broker.post_json("/brokerbuy", buy_body(customer, 20)), 201)["transaction"]
    assert created["customerCode"] == customer.code
    assert recorded_transactions(broker, customer) == 1
