"""Query parameters an endpoint does not take are refused, as unknown body fields are (issue 35, item 7):
400 `malformed_request` naming them and the parameters the endpoint takes, on the API and on the console's
pages; every parameter the API document lists is taken, and the document lists every parameter each
operation takes. In-process, on a database of the module's own (no partner has written: the reads answer at
once)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from interface.http.query_checks import TakenParameters, taken_by_handlers
from interface.http.security import AUDITOR, BROKER, OPERATOR
from tests.e2e.support import PROBLEM_JSON, client_secrets
from tests.in_process import InProcessClient, in_process_app

client = in_process_app(own_database="broker_query_checks")
CLIENT_OF_ROLE = {AUDITOR: "demo-auditor", BROKER: "demo-broker", OPERATOR: "demo-operator"}
# a value each documented parameter takes, by name, else by its schema (`_value_of`)
VALUES = {
    "from": "2026-01-01T00:00:00Z",
    "to": "2026-01-02T00:00:00Z",
    "asOf": "2026-01-03T00:00:00Z",
    "paidLate": "true",
    "after": "ZXYxOgAAAAAAAAAA",  # the events feed's cursor of its beginning
    "types": "transaction.status_changed",
}
GUIDE_CODE = "alice-1"  # any code: a customer or transaction never made is a 404, not a refusal of the query


@pytest.fixture(scope="module")
def document(client: InProcessClient) -> dict[str, Any]:
    answer = client.get("/schema/openapi.json")
    assert answer.status_code == 200
    return answer.json()


@pytest.fixture(scope="module")
def auditor(client: InProcessClient) -> dict[str, str]:
    return client.headers_of("demo-auditor")


def refused(answer: Any) -> dict[str, Any]:
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    problem = answer.json()
    assert problem["code"] == "malformed_request"
    return problem


def test_a_misspelt_filter_of_the_transaction_list_is_refused_naming_it(
    client: InProcessClient, auditor: dict[str, str]
) -> None:
    problem = refused(client.get("/transactions/custodian?customercode=alice", headers=auditor))
    assert problem["errors"] == [
        "query parameter 'customercode' is not one this endpoint takes (did you mean 'customerCode'?)"
    ]
    taken = "asOf, customerCode, from, page, pageSize, paidLate, status, to and type"
    assert problem["detail"].endswith(f"this endpoint takes the query parameters {taken}")


def test_every_unknown_parameter_is_named_once_beside_the_known_ones(
    client: InProcessClient, auditor: dict[str, str]
) -> None:
    query = "status=STAGED&debug&customer_code=alice&debug=1&pageSize=5"
    problem = refused(client.get(f"/transactions/custodian?{query}", headers=auditor))
    assert problem["errors"] == [
        "query parameter 'debug' is not one this endpoint takes",
        "query parameter 'customer_code' is not one this endpoint takes (did you mean 'customerCode'?)",
    ]


def test_an_endpoint_without_query_parameters_says_it_takes_none(
    client: InProcessClient, auditor: dict[str, str]
) -> None:
    problem = refused(
        client.get(f"/transactions/custodian/{GUIDE_CODE}?asOf=2026-01-01T00:00:00Z", headers=auditor)
    )
    assert problem["detail"] == (
        "query parameter 'asOf' is not one this endpoint takes; this endpoint takes no query parameters"
    )


def test_a_long_list_of_unknown_parameters_names_the_first_ten_and_counts_the_rest(
    client: InProcessClient,
) -> None:
    query = "&".join(f"p{number}=1" for number in range(25))
    problem = refused(client.get(f"/health?{query}"))
    assert len(problem["errors"]) == 11
    assert problem["errors"][-1] == "and 15 more query parameters this endpoint does not take"


def test_the_query_is_judged_with_the_requests_head_before_its_token(client: InProcessClient) -> None:
    problem = refused(client.get("/transactions/custodian?customercode=alice"))
    assert "'customercode'" in problem["errors"][0]


def test_options_is_answered_whatever_its_query(client: InProcessClient) -> None:
    answer = client.options("/transactions/custodian?customercode=alice")
    assert answer.status_code == 204
    assert "GET" in answer.headers["allow"]


def test_a_write_refused_for_its_query_leaves_its_idempotency_key_free(client: InProcessClient) -> None:
    broker = client.headers_of(
        "other-broker"
    )  # another partner: demo's reads stay without writes to wait for
    code = f"query-{uuid.uuid4().hex[:10]}"
    body = {"customerCode": code, "trustLevel": "Basic"}
    keyed = {**broker, "Idempotency-Key": f"key-{code}"}
    refused(client.post("/customer?dryRun=true", json=body, headers=keyed))
    assert client.get(f"/customer/{code}", headers=broker).status_code == 404  # nothing was recorded
    assert client.post("/customer", json=body, headers=keyed).status_code == 201


def test_the_document_lists_exactly_the_query_parameters_each_operation_takes(
    client: InProcessClient, document: dict[str, Any]
) -> None:
    documented = {
        operation["operationId"]: frozenset(
            parameter["name"] for parameter in operation.get("parameters", []) if parameter["in"] == "query"
        )
        for operations in document["paths"].values()
        for operation in operations.values()
    }
    taken = taken_by_handlers(client.app)
    by_operation = {
        handler.operation_id: taken[id(handler)]
        for route in client.app.routes
        for handler, _ in getattr(route, "route_handler_map", {}).values()
        if handler.operation_id in documented
    }
    assert by_operation == {operation: TakenParameters(names) for operation, names in documented.items()}


def test_every_parameter_of_the_document_is_taken(client: InProcessClient, document: dict[str, Any]) -> None:
    """Each operation with query parameters, called with every one of them at once by a client of a role it
    admits, answers (or finds no such customer or transaction): no parameter it documents is refused."""
    called = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            parameters = [item for item in operation.get("parameters", []) if item["in"] == "query"]
            if not parameters:
                continue
            role = operation["security"][0]["bearer"][0]
            query = {item["name"]: _value_of(item) for item in parameters}
            url = path.replace("{customer_code}", GUIDE_CODE).replace("{tx_code}", GUIDE_CODE)
            answer = client.request(
                method, url, params=query, headers=client.headers_of(CLIENT_OF_ROLE[role])
            )
            assert answer.status_code in (200, 404), f"{method} {url} {query}: {answer.text}"
            called.append(operation["operationId"])
    assert {"listTransactions", "getCustomerLimits", "getReconciliation"} <= set(called)


def _value_of(parameter: dict[str, Any]) -> str:
    schema = parameter["schema"]
    if schema.get("type") == "integer":  # (the tree sizes `from` and `to` of a consistency proof)
        return str(schema.get("minimum", 1))
    if parameter["name"] in VALUES:
        return VALUES[parameter["name"]]
    if "enum" in schema:
        return str(schema["enum"][0])
    return GUIDE_CODE


def signed_in_console(client: InProcessClient) -> InProcessClient:
    secret = client_secrets(client.var)["demo-auditor"]
    form = {"client_id": "demo-auditor", "client_secret": secret}
    answer = client.post(
        "/console/sign-in", data=form, headers={"Sec-Fetch-Site": "same-origin"}, follow_redirects=False
    )
    assert answer.status_code == 303, answer.text
    return client


def test_a_console_page_with_an_unknown_parameter_answers_the_consoles_refusal_page(
    client: InProcessClient,
) -> None:
    console = signed_in_console(client)
    try:
        answer = console.get("/console/reserves?from=2026-01-01&to=2026-01-31&debug=1")
    finally:
        console.cookies.clear()
    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("text/html")
    assert answer.headers["x-frame-options"] == "DENY"
    assert "query parameter &#39;debug&#39; is not one this endpoint takes" in answer.text
    assert "takes the query parameters from and to" in answer.text


def test_the_consoles_own_forms_and_links_send_only_parameters_their_pages_take(
    client: InProcessClient,
) -> None:
    """The search form and its pages' links (all of its fields, as htmx sends them), a period, an instant."""
    console = signed_in_console(client)
    try:
        for url in (
            "/console/transactions?code=&customer=&status=&from=&to=&page=1",
            "/console/reserves?from=2026-01-01&to=2026-01-31",
            f"/console/transactions/{GUIDE_CODE}?at=",
        ):
            answer = console.get(url, headers={"HX-Request": "true"})
            assert answer.status_code in (200, 404), f"{url}: {answer.text}"
    finally:
        console.cookies.clear()
