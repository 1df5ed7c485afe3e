"""Requests a hostile or careless client sends, over real HTTP: text the ledger cannot store, bodies that are
not JSON or name a key twice, a repeated api_version, cut-off uploads, and keys reused for another request.

Each was answered 2xx (or 500) on c86235d, and a NUL in one partner's paymentReference stalled every
partner's reads; here each is refused before anything is recorded.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

import httpx
import psycopg
import pytest

from tests.e2e.support import (
    ENCODER,
    Api,
    Customer,
    buy_body,
    expect,
    expect_problem,
    limits_used,
    open_limit_windows,
    sell_body,
)


def new_key() -> str:
    return f"hostile-{uuid.uuid4()}"


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


@pytest.fixture
def buyer(broker: Api, customer: Customer) -> Customer:
    open_limit_windows(broker, customer)
    return customer


def bought_today(api: Api, customer: Customer) -> Decimal:
    return limits_used(api, customer.code)["buy", "daily"]


@pytest.mark.parametrize("field", ["paymentReference", "blockchainMessage", "bankAccountNumber", "data"])
def test_a_nul_in_any_text_of_a_buy_is_refused_and_nothing_is_recorded(
    broker: Api, buyer: Customer, field: str
) -> None:
    before = bought_today(broker, buyer)
    value = {"note": "x\u0000y"} if field == "data" else "x\u0000y"

    refused = broker.post_json("/brokerbuy", buy_body(buyer, 100, **{field: value}))

    problem = expect_problem(refused, 422, "text_not_storable")
    assert "NUL" in problem["detail"] and field in problem["detail"]
    assert bought_today(broker, buyer) == before


def test_a_nul_in_a_data_key_is_refused(broker: Api, buyer: Customer) -> None:
    refused = broker.post_json("/brokerbuy", buy_body(buyer, 100, data={"a\u0000b": "x"}))
    expect_problem(refused, 422, "text_not_storable")


def test_a_lone_surrogate_is_refused_naming_its_field(broker: Api, buyer: Customer) -> None:
    body = ENCODER.encode(buy_body(buyer, 100, paymentReference="PLACEHOLDER"))
    body = body.replace(b"PLACEHOLDER", b"x\\ud800y")

    refused = broker.post("/brokerbuy", content=body, headers={"content-type": "application/json"})

    problem = expect_problem(refused, 422, "text_not_storable")
    assert "paymentReference" in problem["detail"] and "U+D800" in problem["detail"]


def test_reads_go_on_after_a_refused_nul_and_other_control_characters_round_trip(
    broker: Api, buyer: Customer
) -> None:
    broker.post_json("/brokerbuy", buy_body(buyer, 100, paymentReference="x\u0000y"))
    created = broker.post_json("/brokerbuy", buy_body(buyer, 100, paymentReference="tab\tbell\u0007end"))
    code = expect(created, 201)["transaction"]["transactionCode"]

    read = expect(broker.get(f"/transactions/custodian/{code}"), 200)

    assert read["transaction"]["paymentReference"] == "tab\tbell\u0007end"


def test_a_nul_in_a_query_parameter_is_400_not_500(broker: Api) -> None:
    refused = broker.get("/transactions/custodian", params={"customerCode": "a\u0000b"})
    problem = expect_problem(refused, 400, "text_not_storable")
    assert "customerCode" in problem["detail"]


def test_a_nul_in_a_path_segment_is_400(broker: Api) -> None:
    expect_problem(broker.get("/customer/a%00b"), 400, "text_not_storable")


def test_a_query_string_that_is_not_utf8_is_400(broker: Api) -> None:
    expect_problem(broker.get("/transactions/custodian?customerCode=%ff"), 400, "text_not_storable")


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", None, "application/json; charset=latin-1"],
)
def test_a_body_that_is_not_sent_as_json_is_415(
    broker: Api, buyer: Customer, content_type: str | None
) -> None:
    before = bought_today(broker, buyer)
    headers = {} if content_type is None else {"content-type": content_type}
    request = broker.build_request(
        "POST", "/brokerbuy", content=ENCODER.encode(buy_body(buyer)), headers=headers
    )
    if content_type is None:
        request.headers.pop("content-type", None)

    refused = broker.send(request)

    expect_problem(refused, 415, "unsupported_media_type")
    assert bought_today(broker, buyer) == before


def test_json_with_a_charset_parameter_is_accepted(broker: Api, buyer: Customer) -> None:
    created = broker.post(
        "/brokerbuy",
        content=ENCODER.encode(buy_body(buyer)),
        headers={"content-type": "application/json; charset=UTF-8"},
    )
    expect(created, 201)


def test_a_repeated_api_version_header_is_400(broker: Api, buyer: Customer, tokens: dict[str, str]) -> None:
    headers = [
        ("authorization", f"Bearer {tokens['demo-broker']}"),
        ("content-type", "application/json"),
        ("api_version", "1.2"),
        ("api_version", "9.9"),
    ]
    request = httpx.Request(
        "POST", broker.base_url.join("/brokerbuy"), headers=headers, content=ENCODER.encode(buy_body(buyer))
    )

    problem = expect_problem(broker.send(request), 400, "api_version_repeated")
    assert "9.9" in problem["detail"]


def test_a_key_named_twice_in_one_object_is_422(broker: Api, buyer: Customer) -> None:
    before = bought_today(broker, buyer)
    body = ENCODER.encode(buy_body(buyer, 100)).replace(b'"fiatValue":100', b'"fiatValue":100,"fiatValue":5')

    refused = broker.post("/brokerbuy", content=body, headers={"content-type": "application/json"})

    problem = expect_problem(refused, 422, "duplicate_key")
    assert "fiatValue" in problem["detail"]
    assert bought_today(broker, buyer) == before


# --- Idempotency-Key: only executed requests are stored ---------------------------------------------------


def test_a_body_refused_by_its_schema_does_not_burn_its_key(broker: Api, buyer: Customer) -> None:
    key = new_key()
    refused = broker.post_json("/brokerbuy", {**buy_body(buyer, 100), "fiatValue": "100"}, keyed(key))
    not_json = broker.post(
        "/brokerbuy", content=b"{", headers={"content-type": "application/json", **keyed(key)}
    )

    corrected = broker.post_json("/brokerbuy", buy_body(buyer, 100), keyed(key))

    expect_problem(refused, 422)
    expect_problem(not_json, 400)
    expect(corrected, 201)


def test_the_same_key_with_another_api_version_is_another_request_and_an_unknown_query_is_refused(
    broker: Api, buyer: Customer
) -> None:
    key, body = new_key(), buy_body(buyer, 100)
    expect(broker.post_json("/brokerbuy", body, keyed(key)), 201)

    with_query = broker.post_json("/brokerbuy?note=1", body, keyed(key))
    other_version = broker.post_json("/brokerbuy", body, {**keyed(key), "api_version": "1.1"})

    # a query parameter the route does not take is refused before the key is looked at
    expect_problem(with_query, 400, "malformed_request")
    expect_problem(other_version, 400, "api_version_unsupported")


def _age_key(database_url: str, key: str) -> None:
    """As if the key's 24 hours had passed."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        aged = conn.execute(
            "UPDATE api.idempotency_keys SET created = now() - interval '25 hours' WHERE key = %s", (key,)
        )
        assert aged.rowcount == 1


def test_a_key_reused_after_24_hours_for_another_buy_is_422_not_the_old_buy(
    broker: Api, buyer: Customer, database_url: str
) -> None:
    key = new_key()
    first = expect(broker.post_json("/brokerbuy", buy_body(buyer, 100), keyed(key)), 201)
    _age_key(database_url, key)
    before = bought_today(broker, buyer)

    bigger = broker.post_json("/brokerbuy", buy_body(buyer, 500), keyed(key))

    problem = expect_problem(bigger, 422, "idempotency_key_reused")
    assert first["transaction"]["transactionCode"] in problem["detail"]
    assert bought_today(broker, buyer) == before


def test_a_key_reused_after_24_hours_for_the_same_buy_finds_the_first_buy(
    broker: Api, buyer: Customer, database_url: str
) -> None:
    key, body = new_key(), buy_body(buyer, 100)
    first = expect(broker.post_json("/brokerbuy", body, keyed(key)), 201)
    _age_key(database_url, key)

    again = expect(broker.post_json("/brokerbuy", body, keyed(key)), 201)

    assert again["transaction"]["transactionCode"] == first["transaction"]["transactionCode"]


def test_a_key_of_a_buy_reused_for_a_sell_makes_a_sell(
    broker: Api, buyer: Customer, database_url: str
) -> None:
    key = new_key()
    bought = expect(broker.post_json("/brokerbuy", buy_body(buyer, 100), keyed(key)), 201)
    _age_key(database_url, key)

    sold = broker.post_json(
        "/paymentrequest/brokersell", sell_body(buyer, cryptoAmount=Decimal("0.0002")), keyed(key)
    )

    sell = expect(sold, 201)["transaction"]
    assert sell["type"] == "BROKERSELL"
    assert sell["transactionCode"] != bought["transaction"]["transactionCode"]


@pytest.mark.parametrize("first_stage", [True, False], ids=["staged then sent", "sent then staged"])
def test_a_key_reused_after_24_hours_with_the_other_stage_is_422_not_the_old_buy(
    broker: Api, buyer: Customer, database_url: str, first_stage: bool
) -> None:
    key = new_key()
    first = expect(broker.post_json("/brokerbuy", buy_body(buyer, 100, stage=first_stage), keyed(key)), 201)
    _age_key(database_url, key)
    before = bought_today(broker, buyer)

    other = broker.post_json("/brokerbuy", buy_body(buyer, 100, stage=not first_stage), keyed(key))

    problem = expect_problem(other, 422, "idempotency_key_reused")
    assert first["transaction"]["transactionCode"] in problem["detail"]
    assert bought_today(broker, buyer) == before
    status = expect(broker.get(f"/transactions/custodian/{first['transaction']['transactionCode']}"), 200)
    assert status["transaction"]["status"] == ("Staged" if first_stage else "Sending")


# --- refusals of the request's own content are not stored; refusals judged against the ledger are ------


@pytest.mark.parametrize(
    ("mistake", "code"),
    [
        ({"paymentMethodCode": "NOPE"}, "payment_method_unknown"),
        ({"fiatValue": Decimal("100.001")}, "amount_too_precise"),
        ({"cryptoCode": "DOGE"}, "crypto_currency_unknown"),
        ({"currencyCode": "XXX"}, "currency_unknown"),
        ({"paymentMethodCode": "BANK_EUR_SELL"}, "payment_method_mismatch"),
        ({"destinationAddress": "not-an-address"}, "crypto_address_invalid"),
        ({"fiatValue": Decimal("1e16")}, "validation_failed"),
    ],
)
def test_a_buy_refused_for_its_own_content_does_not_burn_its_key(
    broker: Api, buyer: Customer, mistake: dict[str, object], code: str
) -> None:
    key = new_key()
    refused = broker.post_json("/brokerbuy", buy_body(buyer, 100, **mistake), keyed(key))
    refused_again = broker.post_json("/brokerbuy", buy_body(buyer, 100, **mistake), keyed(key))

    corrected = broker.post_json("/brokerbuy", buy_body(buyer, 100), keyed(key))

    expect_problem(refused, 422, code)
    expect_problem(refused_again, 422, code)
    assert "idempotent-replayed" not in refused_again.headers
    assert expect(corrected, 201)["transaction"]["status"] == "Sending"
    assert "idempotent-replayed" not in corrected.headers


def test_a_customer_or_reserve_adjustment_refused_for_its_own_content_does_not_burn_its_key(
    broker: Api, operator: Api
) -> None:
    key, customer_code = new_key(), f"hostile-{uuid.uuid4().hex[:12]}"
    customer = {"customerCode": customer_code, "trustLevel": "Gold"}
    unknown_level = broker.post_json("/customer", customer, keyed(key))
    created = broker.post_json("/customer", {**customer, "trustLevel": "Basic"}, keyed(key))
    expect_problem(unknown_level, 422, "trust_level_unknown")
    assert expect(created, 201)["customerCode"] == customer_code

    key, reserve = new_key(), {"name": f"vault-{uuid.uuid4().hex[:8]}", "type": "ColdStore"}
    adjustment = {"kind": "OpeningBalance", "code": "EUR", "amount": 10, "toReserve": reserve}
    cannot_hold = operator.post_json("/reserves/adjustments", adjustment, keyed(key))
    recorded = operator.post_json("/reserves/adjustments", {**adjustment, "code": "BTC"}, keyed(key))
    expect_problem(cannot_hold, 422, "reserve_cannot_hold_asset")
    assert expect(recorded, 201)["code"] == "BTC"


@pytest.mark.parametrize("refusal", ["limit", "not found", "not active"])
def test_a_buy_refused_by_what_the_ledger_holds_is_stored_under_its_key(
    broker: Api, buyer: Customer, refusal: str
) -> None:
    key = new_key()
    customer_code = {
        "limit": buyer.code,
        "not found": f"nobody-{uuid.uuid4().hex[:12]}",
        "not active": _registered_but_not_active(broker),
    }[refusal]
    body = buy_body(buyer, 5000 if refusal == "limit" else 100, customerCode=customer_code)
    first = broker.post_json("/brokerbuy", body, keyed(key))

    replayed = broker.post_json("/brokerbuy", body, keyed(key))
    corrected = broker.post_json("/brokerbuy", buy_body(buyer, 100), keyed(key))

    status, code = {
        "limit": (422, "trust_level_limit_exceeded"),
        "not found": (404, "customer_not_found"),
        "not active": (422, "customer_not_active"),
    }[refusal]
    expect_problem(first, status, code)
    assert replayed.content == first.content and replayed.headers["idempotent-replayed"] == "true"
    expect_problem(corrected, 422, "idempotency_key_reused")


def _registered_but_not_active(api: Api) -> str:
    """The code of a customer registered but not activated (NEW): it cannot buy."""
    code = f"new-{uuid.uuid4().hex[:12]}"
    expect(api.post_json("/customer", {"customerCode": code, "trustLevel": "Basic"}), 201)
    return code
