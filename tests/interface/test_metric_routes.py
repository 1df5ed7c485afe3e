"""The `route` label of the request metrics is the route's path exactly as the API document lists it, so a
dashboard's series and the document's operations match one to one (parameter names included)."""

from __future__ import annotations

import re

from tests.in_process import InProcessClient

ROUTE = re.compile(r'^broker_ledger_requests_total\{method="GET",route="([^"]+)"')
PROBED = (
    "/transactions/custodian/TX0000000000000000",
    "/transactions/custodian/TX0000000000000000/history",
    "/transactions/custodian/TX0000000000000000/callbacks",
    "/customer/nobody-here/limits",
)


def test_the_route_of_every_counted_request_is_a_path_of_the_api_document(client: InProcessClient):
    headers = client.headers_of("demo-broker")
    for path in PROBED:
        assert client.get(path, headers=headers).status_code == 404
    documented = set(client.get("/schema/openapi.json").json()["paths"])
    lines = client.get("/metrics").text.splitlines()
    routes = {match.group(1) for line in lines if (match := ROUTE.match(line))}
    # the API document's own pages (`/schema/{path}`, counted by whatever test read them in this process)
    # and the console's pages (`/console/...`, web pages for people) are not operations of the document
    templated = {route for route in routes if "{" in route and not route.startswith(("/schema", "/console"))}
    assert len(templated) >= len(PROBED), routes
    assert templated <= documented, templated - documented
