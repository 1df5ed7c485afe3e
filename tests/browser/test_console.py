"""The web console at /console, in a real browser (headless Chromium) against a real server: signing in and
out, who sees what, searching transactions, a transaction's timeline at any instant, the reserves and volumes
charts, the system page; and, over plain HTTP, its session cookie and Content-Security-Policy.

Each test saves a screenshot of the page it checks (`tests/browser/pages.py`, docs/console.md shows them),
and fails on any SEVERE entry in the browser's console: script errors, CSP violations, assets not found.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import io
import re
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser

import httpx
import pytest
from selenium.webdriver.support.select import Select

from projections.catalog import PROJECTIONS as CATALOG
from tests.browser.conftest import Ledger
from tests.browser.pages import Browser, ConsoleErrors
from tests.processes import ApiServer

PROJECTIONS = {spec.name for spec in CATALOG}
NAVIGATION = (
    "#nav-transactions",
    "#nav-payouts",
    "#nav-reserves",
    "#nav-volumes",
    "#nav-reconciliation",
    "#nav-system",
)
SESSION_COOKIE = "console_session"
SESSION_SECONDS = 900
HEX = "0123456789ABCDEF"
ISO_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")
COLUMNS = ("total", "locked", "available")


def period_of_a_week() -> tuple[str, str]:
    """`from` and `to` of the seven days up to today (UTC), both included."""
    today = datetime.now(UTC).date()
    return (today - timedelta(days=6)).isoformat(), today.isoformat()


def made_up_code(like: str) -> str:
    """A code of the same shape as `like` (`TX` and hex digits) that no transaction has: each hex digit moved
    along."""
    return "".join(HEX[(HEX.index(c) + 5) % 16] if c in HEX else c for c in like)


def sign_in_as_auditor(browser: Browser, ledger: Ledger) -> None:
    browser.sign_in("demo-auditor", ledger.secrets["demo-auditor"])
    assert browser.path == "/console/transactions"


def listed(browser: Browser) -> dict[str, str]:
    """The transactions the results show: code -> status."""
    rows = browser.finds("table#transactions tr.transaction")
    return {row.get_attribute("data-code"): row.get_attribute("data-status") for row in rows}


def queued(browser: Browser, section: str) -> dict[str, str]:
    """The sells a section of the payout queue shows: code -> status."""
    rows = browser.finds(f"section#{section} tr.queued")
    return {row.get_attribute("data-code"): row.get_attribute("data-status") for row in rows}


def search(browser: Browser, *, code: str = "", customer: str = "", status: str = "") -> None:
    browser.open("/console/transactions")
    browser.fill("#search-code", code)
    browser.fill("#search-customer", customer)
    Select(browser.find("select#search-status")).select_by_value(status)
    results = browser.finds("section#results table#transactions, section#results #no-transactions")
    browser.click("#search-submit", replaced=results[0] if results else None)


# --- the console's error check itself ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "page",
    [
        "<script>console.error('x')</script>",
        "<meta http-equiv='Content-Security-Policy' content=\"script-src 'self'\"><script>var a = 1</script>",
    ],
    ids=["console-error", "csp-violation"],
)
def test_the_console_check_fails_on_a_script_error_or_a_csp_violation(
    blank_browser: Browser, page: str
) -> None:
    blank_browser.driver.get("data:text/html," + urllib.parse.quote(page))
    with pytest.raises(ConsoleErrors, match="1 SEVERE entries"):
        blank_browser.check_console()
    blank_browser.check_console()  # read once: the next page starts clean


# --- signing in and out -----------------------------------------------------------------------------------


def test_an_auditor_signs_in_and_sees_every_page_in_the_navigation(browser: Browser, ledger: Ledger) -> None:
    browser.open("/console/transactions")  # not signed in: sent to the sign-in page
    assert browser.path == "/console/sign-in"
    assert browser.find("form#sign-in").get_attribute("method").lower() == "post"
    assert browser.find("input#client-secret").get_attribute("type") == "password"
    browser.screenshot("sign-in")

    sign_in_as_auditor(browser, ledger)
    signed_in_as = browser.text("#signed-in-as")
    assert "demo-auditor" in signed_in_as and "demo" in signed_in_as.replace("demo-auditor", "")
    for link in NAVIGATION:
        assert browser.has(f"nav#console-nav a{link}"), link
    assert browser.title.startswith(browser.heading)
    browser.screenshot("transactions")


def test_a_wrong_secret_shows_the_sign_in_error(browser: Browser, ledger: Ledger) -> None:
    browser.sign_in("demo-auditor", "not-" + ledger.secrets["demo-auditor"], status=401)
    assert browser.path == "/console/sign-in"
    assert browser.text("#sign-in-error")
    assert not browser.driver.get_cookie(SESSION_COOKIE)
    browser.screenshot("sign-in-refused")


def test_a_broker_only_client_cannot_sign_in(browser: Browser, ledger: Ledger) -> None:
    browser.sign_in("demo-broker", ledger.secrets["demo-broker"], status=403)
    assert browser.path == "/console/sign-in"
    assert browser.text("#sign-in-error")
    assert not browser.driver.get_cookie(SESSION_COOKIE)


def test_after_signing_out_the_transactions_page_leads_to_the_sign_in_page(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)
    browser.sign_out()
    assert browser.path == "/console/sign-in"
    assert not browser.driver.get_cookie(SESSION_COOKIE)
    browser.open("/console/transactions")
    assert browser.path == "/console/sign-in" and browser.has("form#sign-in")


def test_an_operator_lands_on_the_payout_queue_and_opens_a_queued_sells_timeline(
    browser: Browser, ledger: Ledger
) -> None:
    browser.sign_in("demo-operator", ledger.secrets["demo-operator"])
    assert browser.path == "/console/payouts"
    assert browser.heading == "Payout queue" and browser.title.startswith(browser.heading)
    for link in NAVIGATION:
        assert browser.has(f"nav#console-nav a{link}"), link
    assert queued(browser, "to-pay-out") == {ledger.to_pay: "ToPayout"}
    assert queued(browser, "blocked") == {ledger.blocked: "BLOCKED"}
    assert queued(browser, "paid-late") == {} and queued(browser, "refunding") == {}
    calls = browser.text(f"section#to-pay-out tr.to-act[data-code='{ledger.to_pay}']")
    assert f"PUT /transactions/custodian/{ledger.to_pay}/payoutconfirming" in calls
    calls = browser.text(f"section#blocked tr.to-act[data-code='{ledger.blocked}']")
    assert f"POST /transactions/custodian/{ledger.blocked}/resolution" in calls and "AcceptReceived" in calls
    assert ledger.other not in browser.text("main")
    browser.screenshot("payout-queue")

    browser.click(f"section#blocked tr.queued[data-code='{ledger.blocked}'] a.transaction-link")
    assert browser.path == f"/console/transactions/{ledger.blocked}"
    assert browser.text("#transaction-status") == "BLOCKED"
    assert [event.get_attribute("data-type") for event in browser.finds("ol#timeline li.event")] == [
        "Initiated",
        "Blocked",
    ]


def test_an_operator_searches_its_partners_transactions(browser: Browser, ledger: Ledger) -> None:
    browser.sign_in("demo-operator", ledger.secrets["demo-operator"])
    search(browser, status="ToPayout")
    found = listed(browser)
    assert found.get(ledger.to_pay) == "ToPayout" and set(found.values()) == {"ToPayout"}
    search(browser, customer=ledger.other_customer)  # partner other's: not the operator's partner
    assert browser.has("section#results p#no-transactions") and not listed(browser)


# --- transactions -----------------------------------------------------------------------------------------


def test_an_auditor_finds_transactions_by_customer_by_status_and_by_code(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)

    search(browser, customer=ledger.customer)
    assert listed(browser) == {
        ledger.completed: "COMPLETED",
        ledger.staged: "Staged",
        ledger.sell: "Initiated",
    }
    browser.screenshot("search-by-customer")

    search(browser, status="COMPLETED")
    found = listed(browser)
    assert found.get(ledger.completed) == "COMPLETED" and set(found.values()) == {"COMPLETED"}
    search(browser, status="Staged")
    assert ledger.staged in listed(browser) and set(listed(browser).values()) == {"Staged"}

    search(browser, customer=ledger.other_customer)  # partner other's: not the auditor's partner
    assert browser.has("section#results p#no-transactions") and not listed(browser)

    search(browser, code=ledger.completed)
    assert listed(browser) == {ledger.completed: "COMPLETED"}
    browser.screenshot("search-by-code")
    browser.click(f"tr.transaction[data-code='{ledger.completed}'] a.transaction-link")
    assert browser.path == f"/console/transactions/{ledger.completed}"
    assert ledger.completed in browser.text("h1#transaction-code")


def test_a_transactions_timeline_shows_every_event_its_callbacks_and_postings(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)
    browser.open(f"/console/transactions/{ledger.completed}")
    assert ledger.completed in browser.text("h1#transaction-code")
    assert browser.title.startswith(browser.heading)
    assert browser.text("#transaction-status") == "COMPLETED"
    assert browser.text("#as-of") == "now"
    events = browser.finds("ol#timeline li.event")
    shown = [(int(event.get_attribute("data-version")), event.get_attribute("data-type")) for event in events]
    assert shown == [(event["version"], event["type"]) for event in ledger.events]
    for event in events:
        assert event.find_elements("css selector", "time"), event.text
        assert event.find_elements("css selector", "a.as-of-link"), event.text
    assert browser.has("ol#timeline .status-change")
    assert browser.has("section#callbacks .delivery .attempt") or browser.has(
        "section#callbacks p#no-callbacks"
    )
    assert browser.finds("table#postings tr.posting")
    browser.screenshot("timeline")


def test_the_timeline_moves_to_an_events_instant_and_to_a_typed_instant(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)
    browser.open(f"/console/transactions/{ledger.completed}")
    assert len(browser.finds("li.event")) == len(ledger.events) > 2

    browser.click("ol#timeline li.event:first-child a.as-of-link", replaced=browser.find("#as-of"))
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(browser.driver.current_url).query)
    assert "at" in query, browser.driver.current_url
    assert browser.text("#transaction-status") == "Staged"
    assert len(browser.finds("ol#timeline li.event")) == 1
    assert browser.text("#as-of") != "now"
    browser.screenshot("timeline-first-event")

    assert ISO_INSTANT.fullmatch(browser.find("input#instant-at").get_attribute("value"))
    assert ISO_INSTANT.fullmatch(browser.text("#as-of")), browser.text("#as-of")

    browser.type_instant("input#instant-at", ledger.between)
    browser.click("#instant-submit", replaced=browser.find("#as-of"))  # a page, or htmx's swap of its part
    assert browser.text("#transaction-status") == "Sending"
    assert len(browser.finds("ol#timeline li.event")) == len(ledger.as_of(ledger.between)) == 2
    assert browser.text("#as-of") == f"{ledger.between:%Y-%m-%dT%H:%M:%S}Z"
    browser.screenshot("timeline-typed-instant")

    browser.click("a#instant-now", replaced=browser.find("#as-of"))
    assert browser.text("#transaction-status") == "COMPLETED"
    assert browser.text("#as-of") == "now"
    assert len(browser.finds("ol#timeline li.event")) == len(ledger.events)


def test_a_timeline_before_the_transaction_existed_says_so_and_nothing_else(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)
    browser.open(f"/console/transactions/{ledger.completed}?at=2020-01-01T00:00:00Z")
    assert browser.text("#as-of") == "2020-01-01T00:00:00Z"
    assert browser.text("p#not-yet") == "The transaction did not exist yet at that instant."
    assert not browser.has("#transaction-status") and not browser.finds("ol#timeline li.event")
    view = browser.text("#timeline-view")
    assert "—" not in view.split("did not exist yet")[0], view


def test_a_customer_links_to_its_transactions_and_the_search_downloads_as_csv(
    browser: Browser, ledger: Ledger, server: ApiServer
) -> None:
    sign_in_as_auditor(browser, ledger)
    browser.open(f"/console/transactions/{ledger.completed}")
    assert browser.text("a#customer-link") == ledger.customer
    browser.click("a#customer-link")
    assert browser.path == f"/console/transactions?customer={ledger.customer}"
    assert browser.find("input#search-customer").get_attribute("value") == ledger.customer
    assert listed(browser) == {
        ledger.completed: "COMPLETED",
        ledger.staged: "Staged",
        ledger.sell: "Initiated",
    }
    link = browser.find("a#search-csv").get_attribute("href")
    assert link.startswith(browser.url("/console/transactions.csv?")), link
    with signed_in_client(server, "demo-auditor", ledger.secrets["demo-auditor"]) as client:
        answer = client.get(link[len(server.base_url) :])
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    assert answer.headers["content-disposition"].startswith("attachment;")
    codes = [row["transaction_code"] for row in csv.DictReader(io.StringIO(answer.text))]
    assert set(codes) == set(listed(browser)) and len(codes) == 3


def test_the_reconciliation_of_a_week_shows_its_reserves_and_the_blocked_sells_difference(
    browser: Browser, ledger: Ledger, server: ApiServer
) -> None:
    sign_in_as_auditor(browser, ledger)
    browser.click("#nav-reconciliation")
    assert browser.path == "/console/reconciliation" and browser.heading == "Reconciliation"
    start, end = period_of_a_week()
    browser.fill("input#period-from", start)
    browser.fill("input#period-to", end)
    browser.click("#period-submit")
    assert browser.path == f"/console/reconciliation?from={start}&to={end}"
    reserves = browser.finds("table#reconciled-reserves tr.reserve")
    assert "BTC" in {row.get_attribute("data-asset") for row in reserves}
    assert all(row.get_attribute("data-balanced") == "true" for row in reserves)
    assert browser.find("#reconciliation-verdict").get_attribute("data-clean") == "false"
    differences = browser.finds("table#reconciliation-differences tr.difference")
    assert ("amount_mismatch", ledger.blocked) in {
        (row.get_attribute("data-kind"), row.get_attribute("data-code")) for row in differences
    }
    assert browser.finds("table#reconciled-reports tr.report")
    browser.screenshot("reconciliation")

    link = browser.find("a#reconciliation-csv").get_attribute("href")
    with signed_in_client(server, "demo-auditor", ledger.secrets["demo-auditor"]) as client:
        answer = client.get(link[len(server.base_url) :])
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    assert f'filename="reconciliation-{start}-{end}.csv"' in answer.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert len([row for row in rows if row["row"] == "reserve"]) == len(reserves)
    assert len([row for row in rows if row["row"] == "difference"]) == len(differences)


def test_in_a_german_browser_days_and_instants_are_shown_and_typed_as_utc_iso_8601(
    german_browser: Browser, ledger: Ledger
) -> None:
    browser = german_browser
    browser.sign_in("demo-auditor", ledger.secrets["demo-auditor"])
    assert browser.driver.execute_script("return navigator.language").startswith("de")
    browser.open(f"/console/transactions/{ledger.completed}")
    field = browser.find("input#instant-at")
    assert (
        field.get_attribute("type") == "text" and field.get_attribute("placeholder") == "YYYY-MM-DDTHH:MM:SSZ"
    )
    browser.type_instant("input#instant-at", ledger.between)
    browser.click("#instant-submit", replaced=browser.find("#as-of"))
    assert browser.text("#transaction-status") == "Sending"
    shown = f"{ledger.between:%Y-%m-%dT%H:%M:%S}Z"
    assert browser.text("#as-of") == shown
    assert browser.find("input#instant-at").get_attribute("value") == shown
    times = [time.text for time in browser.finds("ol#timeline li.event time")]
    assert times and all(ISO_INSTANT.fullmatch(text) for text in times), times
    browser.screenshot("timeline-de-DE")

    start, end = period_of_a_week()
    browser.open(f"/console/volumes?from={start}&to={end}")
    for css, day in (("input#period-from", start), ("input#period-to", end)):
        assert browser.find(css).get_attribute("type") == "text"
        assert browser.find(css).get_attribute("value") == day

    browser.fill("input#period-from", "21.11.2026")  # the German way: refused by the field itself
    assert not browser.driver.execute_script(
        "return arguments[0].checkValidity()", browser.find("input#period-from")
    )
    browser.open("/console/volumes?from=21.11.2026", status=400)
    assert "from must be a day YYYY-MM-DD" in browser.text("[role=alert]")


def test_another_partners_transaction_looks_exactly_like_an_unknown_one(
    browser: Browser, ledger: Ledger, server: ApiServer
) -> None:
    sign_in_as_auditor(browser, ledger)
    unknown = made_up_code(ledger.other)
    seen = {}
    for code in (ledger.other, unknown):
        browser.open(f"/console/transactions/{code}", status=404)
        assert browser.text("h1#not-found") == f"No transaction {code}"
        seen[code] = (browser.title.replace(code, "<code>"), browser.heading.replace(code, "<code>"))
    assert seen[ledger.other] == seen[unknown]
    browser.screenshot("not-found")

    with signed_in_client(server, "demo-auditor", ledger.secrets["demo-auditor"]) as client:
        answers = [client.get(f"/console/transactions/{code}") for code in (ledger.other, unknown)]
    assert [answer.status_code for answer in answers] == [404, 404]
    other_page, unknown_page = (
        _without_tokens(answer.text.replace(code, "<code>"))
        for answer, code in zip(answers, (ledger.other, unknown), strict=True)
    )
    assert other_page == unknown_page, "\n".join(
        difflib.unified_diff(
            other_page.splitlines(), unknown_page.splitlines(), "other partner's", "unknown", lineterm=""
        )
    )


# --- reserves, volumes, system ----------------------------------------------------------------------------


def test_the_reserves_chart_of_a_week_has_a_point_for_each_of_its_seven_days(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)
    start, end = period_of_a_week()
    browser.open(f"/console/reserves?from={start}&to={end}")
    assert browser.has("form#period #period-submit")
    charts = browser.finds("figure.chart")
    assert charts, "no reserves chart"
    drawn = set()
    for chart in charts:
        subject = (chart.get_attribute("data-asset"), chart.get_attribute("data-reserve"))
        assert all(subject), chart.text
        points = chart.find_elements("css selector", "svg .point")
        if chart.find_elements("css selector", "p.all-zero"):  # all zero: said in words, nothing drawn
            assert not points and not chart.find_elements("css selector", "svg"), subject
            continue
        drawn.add(subject[0])
        assert len(points) == 7, subject
        assert all(point.find_elements("css selector", "title") for point in points)
        labels = chart.find_elements("css selector", "svg text.value-tick")
        assert labels, subject
        for label in labels:  # every digit and the sign shown, inside the chart
            assert Decimal(label.text) == Decimal(label.get_attribute("data-value")), label.text
            assert label.rect["x"] >= chart.find_element("css selector", "svg").rect["x"], label.text
    assert "BTC" in drawn
    assert browser.has("table.chart-data")
    positions = browser.finds("table#reserve-positions tr.reserve-position")
    assert {row.get_attribute("data-asset") for row in positions} >= {"BTC", "EUR"}
    for row in positions:
        total, locked, available = (row.find_element("css selector", f"td.{c}").text for c in COLUMNS)
        assert Decimal(total) - Decimal(locked) == Decimal(available), row.text
    browser.screenshot("reserves")


def test_the_volumes_chart_of_a_week_has_a_point_for_each_of_its_seven_days(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)
    start, end = period_of_a_week()
    browser.open(f"/console/volumes?from={start}&to={end}")
    charts = browser.finds("figure.chart")
    assert charts, "no volumes chart"
    for chart in charts:
        assert chart.get_attribute("data-currency") and chart.get_attribute("data-payment-method"), chart.text
        points = chart.find_elements("css selector", "svg .point")
        assert len(points) == 7, (
            chart.get_attribute("data-currency"),
            chart.get_attribute("data-payment-method"),
        )
        assert all(point.find_elements("css selector", "title") for point in points)
    shown = {
        (chart.get_attribute("data-currency"), chart.get_attribute("data-payment-method")) for chart in charts
    }
    assert ("EUR", "BANK_EUR_BUY") in shown
    assert browser.has("table.chart-data")
    browser.screenshot("volumes")


def test_the_system_page_shows_the_four_projections_and_the_chain_head(
    browser: Browser, ledger: Ledger
) -> None:
    sign_in_as_auditor(browser, ledger)
    browser.click("#nav-system")
    assert browser.path == "/console/system"
    rows = browser.finds("table#projections tr.projection")
    assert {row.get_attribute("data-name") for row in rows} == PROJECTIONS
    assert len(rows) == len(PROJECTIONS)
    deadline = time.monotonic() + 10  # the AuditChain projection links the seeding's last events by then
    while not browser.text("section#chain-head .chain-hash") and time.monotonic() < deadline:
        time.sleep(0.2)
        browser.open("/console/system")
    assert browser.text("section#chain-head .chain-position").isdigit()
    assert len(browser.text("section#chain-head .chain-hash")) == 64
    assert browser.text("section#last-verify .verify-result") in {"passed", "failed", "never run"}
    browser.screenshot("system")


# --- over plain HTTP: the session cookie and the Content-Security-Policy ----------------------------------


def test_the_session_cookie_is_http_only_strict_short_lived_and_not_secure_over_http(
    server: ApiServer, ledger: Ledger
) -> None:
    with signed_in_client(server, "demo-auditor", ledger.secrets["demo-auditor"]) as client:
        answer = client.last_sign_in
    assert answer.status_code == 303 and answer.headers["location"].endswith("/console/transactions")
    set_cookies = [
        value for value in answer.headers.get_list("set-cookie") if value.startswith(SESSION_COOKIE)
    ]
    assert len(set_cookies) == 1, answer.headers.get_list("set-cookie")
    attributes = cookie_attributes(set_cookies[0])
    assert "httponly" in attributes, set_cookies
    assert attributes.get("samesite", "").lower() == "strict", set_cookies
    assert 0 < int(attributes["max-age"]) <= SESSION_SECONDS, set_cookies
    assert "secure" not in attributes, set_cookies
    assert attributes.get("path") == "/console", set_cookies


def test_console_pages_allow_scripts_from_the_console_only_and_none_inline(
    server: ApiServer, ledger: Ledger
) -> None:
    with signed_in_client(server, "demo-auditor", ledger.secrets["demo-auditor"]) as client:
        for path in ("/console/sign-in", "/console/transactions", "/console/system"):
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.status_code)
            policy = csp_directives(answer.headers.get("content-security-policy", ""))
            assert policy.get("script-src") == ["'self'"], (path, policy)
            assert "'unsafe-inline'" not in policy.get("default-src", []), (path, policy)


# --- helpers of the HTTP checks ---------------------------------------------------------------------------


class SignedIn(httpx.Client):
    last_sign_in: httpx.Response  # the sign-in's answer


@contextlib.contextmanager
def signed_in_client(server: ApiServer, client_id: str, secret: str) -> Iterator[SignedIn]:
    """An httpx client holding the console session of `client_id`, signed in through the sign-in form (with
    whatever hidden fields the form has), redirects not followed; its forms say they come from the console's
    own origin, as a browser's do."""
    origin = {"Origin": server.base_url}
    with SignedIn(base_url=server.base_url, timeout=30, follow_redirects=False, headers=origin) as client:
        page = client.get("/console/sign-in")
        assert page.status_code == 200, page.status_code
        form = FormFields.of(page.text, "sign-in")
        form.update(client_id=client_id, client_secret=secret)
        client.last_sign_in = client.post("/console/sign-in", data=form)
        assert client.last_sign_in.status_code == 303, client.last_sign_in.text[:2000]
        yield client


class FormFields(HTMLParser):
    """The named inputs (and their values) of the form with id `form_id` of a page."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.fields: dict[str, str] = {}

    @classmethod
    def of(cls, html: str, form_id: str) -> dict[str, str]:
        parser = cls(form_id)
        parser.feed(html)
        return parser.fields

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form":
            self.inside = found.get("id") == self.form_id
        elif tag == "input" and self.inside and found.get("name"):
            self.fields[found["name"] or ""] = found.get("value") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False


def cookie_attributes(set_cookie: str) -> dict[str, str]:
    """The attributes of one Set-Cookie header, names in lower case (flags such as HttpOnly map to "")."""
    _, *parts = set_cookie.split(";")
    attributes = {}
    for part in parts:
        name, _, value = part.strip().partition("=")
        attributes[name.lower()] = value
    return attributes


def csp_directives(header: str) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            directives[words[0].lower()] = words[1:]
    return directives


def _without_tokens(html: str) -> str:
    """A page less what may differ from one answer to the next by design: hidden inputs' values (a CSRF
    token) and nonces."""
    html = re.sub(
        r"<input\b[^>]*>",
        lambda tag: (
            re.sub(r'\svalue="[^"]*"', "", tag.group()) if 'type="hidden"' in tag.group() else tag.group()
        ),
        html,
    )
    return re.sub(r'\snonce="[^"]*"', "", html)
