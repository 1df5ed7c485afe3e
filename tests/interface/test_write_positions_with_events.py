"""The group committer keeps a partner's write position in the transaction of the partner's events, so a
write needs no statement of its own for read-your-writes; what it did not keep, the middleware keeps."""

from __future__ import annotations

import uuid

import psycopg

from application.store.request_writes import RequestWrites
from tests.databases import kept_position


def new_code() -> str:
    return f"kept-{uuid.uuid4().hex[:12]}"


def test_a_partners_write_position_is_kept_with_its_events(client, database_url):
    use_cases = client.app.state.runtime.use_cases
    written = RequestWrites("demo")
    use_cases.customers.register_customer("demo", new_code(), "Basic", unit=written)
    assert written.position > 0
    assert written.kept == written.position
    assert not written.left_to_keep
    assert kept_position(database_url, "demo") == written.position


def test_a_kept_position_never_goes_back(client, database_url):
    use_cases = client.app.state.runtime.use_cases
    first, later = RequestWrites("other"), RequestWrites("demo")
    use_cases.customers.register_customer("other", new_code(), "Basic", unit=first)
    use_cases.customers.register_customer("demo", new_code(), "Basic", unit=later)
    assert later.position > first.position
    assert kept_position(database_url, "other") >= first.position
    assert kept_position(database_url, "demo") >= later.position


def test_a_write_without_a_partner_is_left_for_the_interface_to_keep(client):
    use_cases = client.app.state.runtime.use_cases
    written = RequestWrites()
    use_cases.customers.register_customer("demo", new_code(), "Basic", unit=written)
    assert written.position > 0
    assert written.kept == 0
    assert written.left_to_keep


def test_a_write_over_http_keeps_its_position_before_its_answer(client, broker, database_url):
    answer = client.post(
        "/customer", json={"customerCode": new_code(), "trustLevel": "Basic"}, headers=broker
    )
    assert answer.status_code == 201, answer.text
    with psycopg.connect(database_url) as conn:
        head = conn.execute("SELECT max(notification_id) FROM ledger.ledger_events").fetchone()[0]
    assert kept_position(database_url, "demo") == head


def test_every_write_route_hands_its_unit_of_work_to_the_store(
    client, broker, operator, customer, database_url
):
    """Each write route passes the request's unit of work to its use case: the partner's position is kept
    up to the log's head before each answer (a route that left it out would keep none)."""

    def head() -> int:
        with psycopg.connect(database_url) as conn:
            return conn.execute("SELECT max(notification_id) FROM ledger.ledger_events").fetchone()[0]

    def written(headers: dict[str, str], method: str, path: str, body: dict) -> dict:
        answer = client.request(method, path, json=body, headers=headers)
        assert answer.status_code in (200, 201), f"{method} {path}: {answer.text}"
        assert kept_position(database_url, "demo") == head(), f"{method} {path} kept no position"
        return answer.json().get("transaction", answer.json())

    code, account = new_code(), customer["account"]
    written(broker, "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
    written(broker, "PUT", f"/customer/{code}", {"status": "ACTIVE"})
    written(broker, "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": customer["address"]})
    buy = {
        "customerCode": customer["code"],
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "fiatValue": 50,
        "destinationAddress": customer["address"],
        "paymentMethodCode": "BANK_EUR_BUY",
        "stage": True,
    }
    staged = written(broker, "POST", "/brokerbuy", buy)["transactionCode"]
    written(broker, "POST", f"/transactions/custodian/{staged}/commit", {})
    sendout = {"transactionCode": staged, "txId": f"out-{staged}", "confirmations": 1}
    written(operator, "POST", "/chain/sendouts", sendout)
    sell = {
        "customerCode": customer["code"],
        "accountCode": account,
        "currencyCode": "EUR",
        "cryptoCode": "BTC",
        "paymentMethodCode": "BANK_EUR_SELL",
        "cryptoAmount": 0.001,
    }
    paid = paid_sell(written, broker, operator, "/paymentrequest/brokersell", sell)
    written(operator, "PUT", f"/transactions/custodian/{paid}/payoutconfirming", {})
    written(operator, "PUT", f"/transactions/custodian/{paid}/payout", {})
    account_buy = {"accountCode": account, "paymentMethodCode": "BANK_EUR_BUY", "amount": 50}
    awaiting = written(broker, "POST", "/buy/broker", account_buy)["transactionCode"]
    execution = {"transactionCode": awaiting, "resultCode": "PAYMENTFAILED"}
    written(broker, "POST", "/Transaction/execute", execution)
    account_sell = {"accountCode": account, "paymentMethodCode": "BANK_EUR_SELL", "cryptoAmount": 0.001}
    other = paid_sell(written, broker, operator, "/sell/broker", account_sell)
    older_version = {**operator, "api_version": "1.1"}  # the sell status update is served at 1.1
    written(older_version, "PUT", f"/transaction/{other}", {"statusCode": "SellCompleted"})
    vault = {"name": "vault-1", "type": "ColdStore"}
    opening = {"kind": "OpeningBalance", "code": "BTC", "amount": 1, "toReserve": vault}
    written(operator, "POST", "/reserves/adjustments", opening)


def paid_sell(written, broker: dict[str, str], operator: dict[str, str], path: str, body: dict) -> str:
    """A sell created at `path` and paid in full, confirmed (ToPayout); its code."""
    sell = written(broker, "POST", path, body)
    deposit = {
        "cryptoCode": "BTC",
        "address": sell["destinationCryptoAddress"],
        "txId": f"in-{sell['transactionCode']}",
        "cryptoAmount": body["cryptoAmount"],
        "confirmations": 6,
    }
    written(operator, "POST", "/chain/deposits", deposit)
    return sell["transactionCode"]
