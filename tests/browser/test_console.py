"""The web console at /console, in a real browser (headless Chromium) against a real server: signing in and
out, who sees what, searching transactions, a transaction's timeline at any instant, the reserves and volumes
charts, the system page; and, over plain HTTP, its session cookie and Content-Security-Policy.

Each test saves a screenshot of the page it checks (`tests/browser/pages.py`, docs/console.md shows them),
and fails on any SEVERE entry in the browser's console: script errors, CSP violations, assets not found.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import httpx
import pytest
from selenium.webdriver.support.select import Select

from tests.browser.conftest import Ledger
from tests.browser.pages import Browser, ConsoleErrors
from tests.processes import ApiServer

PROJECTIONS = {"ReadModels", "Postings", "AuditChain", "CallbackOutbox"}
SESSION_COOKIE = "console_session"
SESSION_SECONDS = 900
HEX = "0123456789ABCDEF"


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
    for link in ("#nav-transactions", "#nav-reserves", "#nav-volumes", "#nav-system"):
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


def test_an_operator_sees_no_transactions_link_and_is_forbidden_the_transactions_page(
    browser: Browser, ledger: Ledger
) -> None:
    browser.sign_in("demo-operator", ledger.secrets["demo-operator"])
    assert browser.path.startswith("/console/reserves")
    assert browser.has("nav#console-nav a#nav-reserves")
    assert not browser.has("#nav-transactions")
    browser.open("/console/transactions", status=403)
    assert browser.has("h1#forbidden")
    browser.screenshot("forbidden")


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

    browser.type_instant("input#instant-at", ledger.between)
    browser.click("#instant-submit", replaced=browser.find("#as-of"))  # a page, or htmx's swap of its part
    assert browser.text("#transaction-status") == "Sending"
    assert len(browser.finds("ol#timeline li.event")) == len(ledger.as_of(ledger.between)) == 2
    assert browser.text("#as-of") != "now"
    browser.screenshot("timeline-typed-instant")

    browser.click("a#instant-now", replaced=browser.find("#as-of"))
    assert browser.text("#transaction-status") == "COMPLETED"
    assert browser.text("#as-of") == "now"
    assert len(browser.finds("ol#timeline li.event")) == len(ledger.events)


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
    for chart in charts:
        assert chart.get_attribute("data-asset") and chart.get_attribute("data-reserve"), chart.text
        points = chart.find_elements("css selector", "svg .point")
        assert len(points) == 7, (chart.get_attribute("data-asset"), chart.get_attribute("data-reserve"))
        assert all(point.find_elements("css selector", "title") for point in points)
    assert "BTC" in {chart.get_attribute("data-asset") for chart in charts}
    assert browser.has("table.chart-data")
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
