"""The console (issue 29) over HTTP, in-process with its projections and a clock the tests move: sessions,
each page's figures against the API's, the partner's scope, roles, refusals as pages, and the headers that
keep a browser strict. The browser's side (htmx, the charts' script, console errors) is tests/browser's."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import jwt
import pytest

from application.credentials import VAR_ENV
from application.store.database import DATABASE_URL_ENV
from bench.clock import FakeClock
from interface.cli.main import main
from interface.environment import DEFAULT_CONSOLE_ORIGIN
from projections.audit_sql import OK, Check
from projections.audit_verifications import record_verification
from projections.catalog import PROJECTIONS
from tests.e2e.support import AddressSource, Customer, buy_body, client_secrets, unique_code
from tests.in_process import InProcessClient, RoleCalls, in_process_app

START = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
CLOCK = FakeClock(START)
client = in_process_app(projections=True, own_database="broker_console", clock=CLOCK)
HTML = "text/html"
FROM_THE_CONSOLE = {"Origin": DEFAULT_CONSOLE_ORIGIN}  # the console's origin, as a browser on its page sends


class Desk(RoleCalls):
    def customer(self, addresses: AddressSource, role: str = "broker") -> Customer:
        code = unique_code("con")
        self.call(role, "POST", "/customer", {"customerCode": code, "trustLevel": "Basic"})
        self.call(role, "PUT", f"/customer/{code}", {"status": "ACTIVE"})
        address = addresses()
        account = self.call(role, "POST", f"/customer/{code}/accounts", {"customerCryptoAddress": address})
        return Customer(code, account["accountCode"], address, "")

    def completed_buy(self, customer: Customer, fiat: int, tx_id: str) -> str:
        code = self.call("broker", "POST", "/brokerbuy", buy_body(customer, fiat))["transaction"][
            "transactionCode"
        ]  # a buy of this payment method is committed at once
        CLOCK.advance(300)
        body = {"transactionCode": code, "txId": tx_id, "confirmations": 6}
        self.call("operator", "POST", "/chain/sendouts", body)
        return code


@pytest.fixture(scope="module")
def ledger(client: InProcessClient) -> dict[str, Any]:
    """Two days of a partner's trading: an opening balance and a buy on day one, another buy on day two;
    and a buy of the other partner."""
    roles = {"broker": "demo-broker", "operator": "demo-operator", "auditor": "demo-auditor"}
    desk = Desk(
        client, {role: client.headers_of(name) for role, name in (roles | {"other": "other-broker"}).items()}
    )
    addresses = AddressSource()
    opening = {"kind": "OpeningBalance", "code": "BTC", "amount": Decimal(2), "toReserve": _hot_wallet()}
    desk.call("operator", "POST", "/reserves/adjustments", opening)
    alice = desk.customer(addresses)
    first = desk.completed_buy(alice, 100, "sendout-day-1")
    CLOCK.advance(86_400)
    second = desk.completed_buy(alice, 250, "sendout-day-2")
    other = desk.customer(addresses, "other")
    foreign = desk.call("other", "POST", "/brokerbuy", buy_body(other, 50))["transaction"]["transactionCode"]
    return {"alice": alice, "first": first, "second": second, "foreign": foreign, "desk": desk}


def _hot_wallet() -> dict[str, str]:
    return {"name": "hot-wallet", "type": "HotWallet"}


@pytest.fixture
def auditor(client: InProcessClient, ledger: dict[str, Any]) -> Iterator[InProcessClient]:
    """The client signed in as the demo partner's auditor (and signed out after)."""
    signed_in(client, "demo-auditor")
    yield client
    client.cookies.clear()


def signed_in(client: InProcessClient, client_id: str) -> Any:
    secret = client_secrets(client.var)[client_id]
    form = {"client_id": client_id, "client_secret": secret}
    return client.post("/console/sign-in", data=form, headers=FROM_THE_CONSOLE, follow_redirects=False)


def points(html: str) -> list[int]:
    """How many points each chart of the page has, chart by chart."""
    charts = html.split('<figure class="chart"')[1:]
    return [len(re.findall(r'class="point[ "]', chart)) for chart in charts]


def test_a_page_without_a_session_sends_the_browser_to_sign_in(client: InProcessClient) -> None:
    client.cookies.clear()
    answer = client.get("/console/transactions", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/sign-in"


def test_htmx_is_told_to_load_the_sign_in_page_whole_when_the_session_has_ended(
    client: InProcessClient,
) -> None:
    client.cookies.clear()
    answer = client.get(
        "/console/transactions?code=X", headers={"HX-Request": "true"}, follow_redirects=False
    )
    assert answer.headers["hx-redirect"] == "/console/sign-in"


def test_signing_in_sets_a_short_lived_strict_http_only_cookie(
    client: InProcessClient, ledger: dict[str, Any]
) -> None:
    answer = signed_in(client, "demo-auditor")
    assert answer.status_code == 303 and answer.headers["location"] == "/console/transactions"
    cookie = answer.headers["set-cookie"]
    assert "console_session=" in cookie and "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    assert "Path=/console" in cookie and "Max-Age=900" in cookie and "Secure" not in cookie
    client.cookies.clear()


def test_the_cookie_is_secure_when_the_console_is_served_over_tls(client: InProcessClient) -> None:
    secret = client_secrets(client.var)["demo-auditor"]
    answer = client.post(
        "/console/sign-in",
        data={"client_id": "demo-auditor", "client_secret": secret},
        headers={"X-Forwarded-Proto": "https", **FROM_THE_CONSOLE},
        follow_redirects=False,
    )
    assert "Secure" in answer.headers["set-cookie"]
    client.cookies.clear()


@pytest.mark.parametrize(
    ("client_id", "secret", "status", "message"),
    [
        ("demo-auditor", "wrong", 401, "unknown client or wrong secret"),
        ("nobody", "wrong", 401, "unknown client or wrong secret"),
        ("demo-broker", None, 403, "neither the auditor nor the operator role"),
    ],
)
def test_a_refused_sign_in_shows_why_on_the_sign_in_page(
    client: InProcessClient, client_id: str, secret: str | None, status: int, message: str
) -> None:
    secret = secret or client_secrets(client.var)[client_id]
    form = {"client_id": client_id, "client_secret": secret}
    answer = client.post("/console/sign-in", data=form, headers=FROM_THE_CONSOLE)
    assert answer.status_code == status, answer.text
    assert 'id="sign-in-error"' in answer.text and message in answer.text
    assert "console_session" not in answer.headers.get("set-cookie", "")


def test_a_form_posted_from_another_site_is_refused(client: InProcessClient) -> None:
    secret = client_secrets(client.var)["demo-auditor"]
    answer = client.post(
        "/console/sign-in",
        data={"client_id": "demo-auditor", "client_secret": secret},
        headers={"Origin": "https://attacker.example"},
    )
    assert answer.status_code == 403 and 'id="forbidden"' in answer.text


def test_every_page_forbids_inline_script_and_framing(auditor: InProcessClient) -> None:
    for path in ("/console/sign-in", "/console/transactions", "/console/reserves", "/console/system"):
        answer = auditor.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-type"].startswith(HTML)
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert answer.headers["cache-control"] == "no-store"
        assert "<script>" not in answer.text and " on" + "click=" not in answer.text


def test_the_search_finds_the_partners_transactions_by_customer_status_and_code(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    alice = ledger["alice"].code
    page = auditor.get(f"/console/transactions?customer={alice}").text
    assert re.findall(r'data-code="([^"]+)"', page) == [ledger["second"], ledger["first"]]
    assert ledger["foreign"] not in auditor.get("/console/transactions").text
    assert 'id="no-transactions"' in auditor.get(f"/console/transactions?customer={alice}&status=Staged").text
    by_code = auditor.get(f"/console/transactions?code={ledger['first']}").text
    assert re.findall(r'data-code="([^"]+)"', by_code) == [ledger["first"]]
    day_one = START.date().isoformat()
    on_day_one = auditor.get(f"/console/transactions?customer={alice}&from={day_one}&to={day_one}").text
    assert re.findall(r'data-code="([^"]+)"', on_day_one) == [ledger["first"]]


def test_htmx_gets_only_the_results_it_swaps_in(auditor: InProcessClient, ledger: dict[str, Any]) -> None:
    answer = auditor.get(
        f"/console/transactions?customer={ledger['alice'].code}", headers={"HX-Request": "true"}
    )
    assert answer.text.lstrip().startswith('<section id="results"')
    assert "<html" not in answer.text


def test_a_timeline_shows_every_event_with_its_status_change_and_postings(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    page = auditor.get(f"/console/transactions/{ledger['first']}").text
    assert re.findall(r'data-type="([^"]+)"', page) == ["Staged", "Committed", "Completed"]
    assert '<dd id="transaction-status">COMPLETED</dd>' in page
    assert "Sending → COMPLETED" in page
    assert page.count('class="posting"') > 0 and 'id="no-callbacks"' in page
    actors = re.findall(r'<span class="actor">by ([^<]+)</span>', page)  # who caused each event
    assert len(actors) == 3 and all(re.fullmatch(r"demo-\w+ \(\w+\), request \S+", who) for who in actors)


def test_the_instant_picker_shows_the_transaction_as_it_stood_then(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    history = ledger["desk"].call("auditor", "GET", f"/transactions/custodian/{ledger['first']}/history")
    committed_at = history["events"][1]["timestamp"]  # committed at once: at the time it was staged
    page = auditor.get(f"/console/transactions/{ledger['first']}", params={"at": committed_at}).text
    assert re.findall(r'data-type="([^"]+)"', page) == ["Staged", "Committed"]
    assert '<dd id="transaction-status">Sending</dd>' in page
    now = auditor.get(f"/console/transactions/{ledger['first']}").text
    assert 0 < page.count('class="posting"') < now.count('class="posting"')
    typed = auditor.get(f"/console/transactions/{ledger['first']}", params={"at": "2020-01-01T00:00"}).text
    assert "did not exist yet" in typed and 'data-type="' not in typed
    before = typed.split('id="as-of"')[1].split('id="not-yet"')[0]
    assert "—" not in before and 'id="transaction-status"' not in typed  # no stray status before it existed
    assert 'value="2020-01-01T00:00:00Z"' in typed  # the picker shows the instant as UTC ISO 8601
    iso = auditor.get(f"/console/transactions/{ledger['first']}", params={"at": "2020-01-01T00:00:00Z"})
    assert iso.status_code == 200 and "did not exist yet" in iso.text
    wrong = auditor.get(f"/console/transactions/{ledger['first']}", params={"at": "yesterday"})
    assert wrong.status_code == 400 and "RFC 3339" in wrong.text


def test_another_partners_transaction_is_as_unknown_as_one_never_made(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    foreign = auditor.get(f"/console/transactions/{ledger['foreign']}")
    unknown = auditor.get("/console/transactions/TXNOSUCHTHING0000")
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.text.replace(ledger["foreign"], "CODE") == unknown.text.replace(
        "TXNOSUCHTHING0000", "CODE"
    )


def test_the_reserves_chart_has_a_point_per_day_each_the_balance_at_its_end(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    last = START.date() + timedelta(days=1)
    first = last - timedelta(days=6)
    page = auditor.get(f"/console/reserves?from={first}&to={last}").text
    assert 7 in points(page) and set(points(page)) <= {0, 7}
    for chart in page.split('<figure class="chart"')[1:]:  # each a point a day, or all zero said in words
        assert chart.count("<tr><td>") == 7
        assert ('class="point' in chart) != ('class="all-zero"' in chart), chart[:200]
    chart = page.split('data-asset="BTC" data-reserve="hot-wallet"')[1].split("</figure>")[0]
    figures = dict(re.findall(r"<tr><td>([\d-]+)</td><td class=\"amount\">([-\d.]+)</td></tr>", chart))
    for day in (START.date() - timedelta(days=1), START.date(), last):
        end = datetime.combine(day + timedelta(days=1), datetime.min.time(), UTC) - timedelta(microseconds=1)
        reserves = ledger["desk"].call(
            "auditor", "GET", f"/reserves?asOf={end.isoformat().replace('+00:00', 'Z')}"
        )
        (hot,) = [r for r in reserves["cryptoReserves"] if r["name"] == "hot-wallet" and r["code"] == "BTC"]
        assert Decimal(figures[day.isoformat()]) == Decimal(str(hot["total"])), day


def test_the_volumes_chart_has_a_point_per_day_each_that_days_volume(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    day_one = START.date()
    page = auditor.get(
        f"/console/volumes?from={day_one - timedelta(days=5)}&to={day_one + timedelta(days=1)}"
    ).text
    assert points(page) == [7]
    assert 'data-currency="EUR" data-payment-method="BANK_EUR_BUY"' in page
    figures = dict(re.findall(r"<tr><td>([\d-]+)</td><td class=\"amount\">([-\d.]+)</td></tr>", page))
    assert Decimal(figures[day_one.isoformat()]) == 100
    assert Decimal(figures[(day_one + timedelta(days=1)).isoformat()]) == 250
    assert Decimal(figures[(day_one - timedelta(days=1)).isoformat()]) == 0


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("from=2026-13-01", "from must be a day"),
        ("from=2026-03-05&to=2026-03-01", "must not be after"),
        ("from=2024-01-01&to=2026-03-01", "at most 366 days"),
    ],
)
def test_a_period_that_cannot_be_read_is_refused_with_what_to_type(
    auditor: InProcessClient, query: str, message: str
) -> None:
    answer = auditor.get(f"/console/reserves?{query}")
    assert answer.status_code == 400 and message in answer.text
    assert 'id="console-nav"' in answer.text  # still a console page, signed in


def test_the_system_page_shows_the_projections_the_chain_head_and_the_last_verify(
    auditor: InProcessClient, ledger: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    page = auditor.get("/console/system").text
    names = re.findall(r'<tr class="projection" data-name="([^"]+)"', page)
    assert sorted(names) == sorted(spec.name for spec in PROJECTIONS)
    assert re.search(r'class="chain-hash">[0-9a-f]{64}<', page)
    assert 'class="verify-result">never run<' in page
    monkeypatch.setenv(DATABASE_URL_ENV, auditor.database_url)
    monkeypatch.setenv(VAR_ENV, str(auditor.var))
    with pytest.raises(SystemExit) as verified:
        main(["audit", "verify"])
    assert verified.value.code == 0
    page = auditor.get("/console/system").text
    assert 'class="verify-result">passed<' in page
    assert ('id="verify-behind"' in page) != ('id="verify-current"' in page)


def test_the_system_page_flags_a_last_verify_older_than_the_logs_head(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    checks = [Check("audit chain", OK, ["fine"])]
    record_verification(auditor.database_url, START - timedelta(days=1), checks)  # before every event
    page = auditor.get("/console/system").text
    assert 'class="verify-result">passed<' in page and 'id="verify-behind"' in page
    head = re.search(r'id="log-head">(\d+)<', page)
    assert head and f"position {head.group(1)}" in page
    record_verification(auditor.database_url, datetime(9999, 1, 1, tzinfo=UTC), checks)  # after them all
    page = auditor.get("/console/system").text
    assert 'id="verify-behind"' not in page and 'id="verify-current"' in page


def test_an_operator_lands_on_the_payout_queue_and_reads_its_partners_transactions(
    client: InProcessClient, ledger: dict[str, Any]
) -> None:
    answer = signed_in(client, "demo-operator")
    assert answer.headers["location"] == "/console/payouts"
    reserves = client.get("/console/reserves").text
    for link in ("nav-payouts", "nav-transactions", "nav-reserves"):
        assert f'id="{link}"' in reserves, link
    listed = client.get(f"/console/transactions?customer={ledger['alice'].code}").text
    assert re.findall(r'data-code="([^"]+)"', listed) == [ledger["second"], ledger["first"]]
    assert ledger["foreign"] not in client.get("/console/transactions").text
    timeline = client.get(f"/console/transactions/{ledger['first']}").text
    assert '<dd id="transaction-status">COMPLETED</dd>' in timeline
    assert client.get(f"/console/transactions/{ledger['foreign']}").status_code == 404
    client.cookies.clear()


def test_signing_out_ends_the_session(client: InProcessClient, ledger: dict[str, Any]) -> None:
    signed_in(client, "demo-auditor")
    answer = client.post("/console/sign-out", headers=FROM_THE_CONSOLE, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"
    assert "Max-Age=0" in answer.headers["set-cookie"]
    assert client.get("/console/transactions", follow_redirects=False).status_code == 303


def test_a_session_lasts_fifteen_minutes_whatever_a_tokens_lifetime(
    client: InProcessClient, ledger: dict[str, Any]
) -> None:
    signed_in(client, "demo-auditor")
    claims = jwt.decode(client.cookies.get("console_session"), options={"verify_signature": False})
    client.cookies.clear()
    assert claims["exp"] - claims["iat"] == 900
    assert claims["roles"] == ["auditor"] and claims["partner"] == "demo"


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_customer_links_to_its_transactions_and_postings_are_at_their_assets_scale(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    alice = ledger["alice"].code
    timeline = auditor.get(f"/console/transactions/{ledger['first']}").text
    assert f'id="customer-link" href="/console/transactions?customer={alice}"' in timeline
    listed = auditor.get(f"/console/transactions?customer={alice}").text
    assert listed.count(f'class="customer-link" href="/console/transactions?customer={alice}"') == 2
    postings = re.findall(r'<tr class="posting">.*?</tr>', timeline, re.S)
    assert postings
    for row in postings:
        asset = re.search(r"<td>(BTC|EUR)</td>", row)
        assert asset, row
        places = {"BTC": 8, "EUR": 2}[asset.group(1)]
        amounts = re.findall(r'<td class="amount">(-?\d+(?:\.\d+)?)</td>', row)
        assert amounts and all(len(amount.partition(".")[2]) == places for amount in amounts), row


def test_the_search_downloads_as_csv_with_the_same_transactions_and_formulas_made_inert(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    desk, alice = ledger["desk"], ledger["alice"]
    formula = '=HYPERLINK("http://evil.example")'
    odd = desk.call("broker", "POST", "/brokerbuy", buy_body(alice, 75, paymentReference=formula))
    code = odd["transaction"]["transactionCode"]
    answer = auditor.get(f"/console/transactions.csv?customer={alice.code}")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/csv")
    assert answer.headers["content-disposition"] == 'attachment; filename="transactions.csv"'
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    rows = csv_rows(answer.text)
    page = auditor.get(f"/console/transactions?customer={alice.code}").text
    assert [row["transaction_code"] for row in rows] == re.findall(r'data-code="([^"]+)"', page)
    (odd_row,) = [row for row in rows if row["transaction_code"] == code]
    assert odd_row["payment_reference"] == "'" + formula
    assert odd_row["fiat_value"] == "75.00" and len(odd_row["crypto_amount"].partition(".")[2]) == 8
    assert odd_row["created"].endswith("Z")
    one = csv_rows(auditor.get(f"/console/transactions.csv?code={ledger['first']}").text)
    assert [row["transaction_code"] for row in one] == [ledger["first"]]
    foreign = csv_rows(auditor.get(f"/console/transactions.csv?code={ledger['foreign']}").text)
    assert foreign == []


def test_the_reserves_page_shows_each_reserves_total_locked_and_available_as_the_api(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    page = auditor.get("/console/reserves").text
    reserves = ledger["desk"].call("auditor", "GET", "/reserves")
    shown = {
        (name, code): (total, locked, available)
        for name, code, total, locked, available in re.findall(
            r'<tr class="reserve-position" data-reserve="([^"]+)" data-asset="([^"]+)">.*?'
            r'class="amount total">([-\d.]+)<.*?class="amount locked">([-\d.]+)<.*?'
            r'class="amount available">([-\d.]+)<',
            page,
            re.S,
        )
    }
    api = [*reserves["cryptoReserves"], *reserves["currencyReserves"]]
    assert api and len(shown) == len(api)
    for reserve in api:
        total, locked, available = shown[(reserve["name"], reserve["code"])]
        assert Decimal(total) == Decimal(str(reserve["total"]))
        assert Decimal(locked) == Decimal(str(reserve["locked"]))
        assert Decimal(available) == Decimal(str(reserve["available"])) == Decimal(total) - Decimal(locked)


def test_the_reconciliation_page_and_its_csv_show_what_the_api_answers_for_the_period(
    auditor: InProcessClient, ledger: dict[str, Any]
) -> None:
    first, last = START.date(), START.date() + timedelta(days=1)
    page = auditor.get(f"/console/reconciliation?from={first}&to={last}")
    assert page.status_code == 200, page.text
    api = ledger["desk"].call(
        "auditor",
        "GET",
        f"/reconciliation?from={first}T00:00:00Z&to={last + timedelta(days=1)}T00:00:00Z&pageSize=1000",
    )
    assert f'data-clean="{str(api["clean"]).lower()}"' in page.text
    shown = re.findall(
        r'<tr class="reserve" data-reserve="([^"]+)" data-asset="([^"]+)" data-balanced="(\w+)">', page.text
    )
    assert sorted(shown) == sorted(
        (r["name"], r["code"], str(r["balanced"]).lower()) for r in api["reserves"]
    )
    kinds = re.findall(r'<tr class="difference" data-kind="([^"]+)"', page.text)
    assert kinds == [d["kind"] for d in api["differences"]]
    assert f'<span class="count">{api["reportsTotal"]}</span>' in page.text
    assert 'href="/console/reconciliation.csv?from=' in page.text

    answer = auditor.get(f"/console/reconciliation.csv?from={first}&to={last}")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    assert f'filename="reconciliation-{first}-{last}.csv"' in answer.headers["content-disposition"]
    rows = csv_rows(answer.text)
    reserves = {(row["reserve"], row["asset"]): row for row in rows if row["row"] == "reserve"}
    for reserve in api["reserves"]:
        row = reserves[(reserve["name"], reserve["code"])]
        assert Decimal(row["opening"]) + Decimal(row["postings"]) == Decimal(row["closing"])
        assert Decimal(row["closing"]) == Decimal(str(reserve["closing"]))
        places = {"BTC": 8, "ETH": 18, "EUR": 2}.get(reserve["code"])
        assert places is None or len(row["closing"].partition(".")[2]) == places, row
    assert len([row for row in rows if row["row"] == "report"]) == api["reportsTotal"]
    assert [row["kind"] for row in rows if row["row"] == "difference"] == kinds


def test_a_reconciliation_of_an_unreadable_period_is_refused_with_what_to_type(
    auditor: InProcessClient,
) -> None:
    answer = auditor.get("/console/reconciliation?from=27.11.2026")
    assert answer.status_code == 400 and "from must be a day YYYY-MM-DD" in answer.text
    assert auditor.get("/console/reconciliation.csv?from=2024-01-01&to=2026-03-01").status_code == 400
