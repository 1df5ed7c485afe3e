"""Paths put into their routes' spelling before routing (`interface.http.request_head`)."""

from __future__ import annotations

from interface.http import request_head as paths
from interface.http.request_head import CaseInsensitivePaths, RouteShape

ROUTES = ["/brokerbuy", "/brokerbuy/simulate", "/Transaction/Execute", "/customer/{customerCode}/accounts"]


def test_a_path_spelled_as_its_route_is_taken_as_it_is_without_trying_the_shapes(monkeypatch):
    routes = CaseInsensitivePaths(path for path in ROUTES)  # a generator, as the app passes its routes
    tried = []
    monkeypatch.setattr(RouteShape, "spelled", lambda self, parts: tried.append(self) or None)
    assert routes.spelled("/brokerbuy") == "/brokerbuy"
    assert routes.spelled("/Transaction/Execute") == "/Transaction/Execute"
    assert tried == []


def test_a_path_in_another_case_takes_its_routes_spelling_and_keeps_the_codes_case():
    routes = CaseInsensitivePaths(ROUTES)
    assert routes.spelled("/transaction/execute") == "/Transaction/Execute"
    assert routes.spelled("/CUSTOMER/Cust-7/Accounts") == "/customer/Cust-7/accounts"
    assert routes.spelled("/BrokerBuy/Simulate/") == "/brokerbuy/simulate/"


def test_a_path_of_no_route_is_left_as_it_is():
    assert CaseInsensitivePaths(ROUTES).spelled("/no/such/route") == "/no/such/route"
    assert paths.CaseInsensitivePaths([]).spelled("/") == "/"
