"""The ends of the calendar (issue 35): every instant and day the API and the console take is read by the one
reading (`interface.shared.instants`), so a value whose UTC time leaves the years 1 to 9999, or whose use
would (a period's last day 9999-12-31, whose end is in the year 10000), or which is not of the documented
form, is a 400 naming the parameter and the form, never a 500; and the first and last instants and days
that can be counted with are answered like any other. Over HTTP on the real app in-process, its projections
running."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import quote

import pytest

from bench.clock import FakeClock
from tests.e2e.support import AddressSource, buy_body, unique_code
from tests.in_process import InProcessClient, RoleCalls, in_process_app
from tests.interface.test_console_pages import signed_in

CLOCK = FakeClock(datetime(2026, 3, 1, 10, 0, tzinfo=UTC))
client = in_process_app(projections=True, own_database="broker_calendar_ends", clock=CLOCK)
FORM = "must be an RFC 3339 date-time with an offset"
YEARS = "within the years 0001 to 9999 in UTC"


@pytest.fixture(scope="module")
def desk(client: InProcessClient) -> RoleCalls:
    roles = {"broker": "demo-broker", "operator": "demo-operator", "auditor": "demo-auditor"}
    return RoleCalls(client, {role: client.headers_of(name) for role, name in roles.items()})


@pytest.fixture(scope="module")
def bought(desk: RoleCalls) -> dict[str, str]:
    """A customer and a buy of hers."""
    customer = desk.active_customer("broker", unique_code("ends"), AddressSource()())
    buy = desk.call("broker", "POST", "/brokerbuy", buy_body(customer, 100))
    return {"customer": customer.code, "transaction": buy["transaction"]["transactionCode"]}


def refused(desk: RoleCalls, role: str, path: str, parameter: str) -> str:
    """The detail of the 400 of `path`, which names the parameter and its form."""
    answer = desk.call(role, "GET", path, status=400)
    assert answer["code"] == "malformed_request"
    assert answer["detail"].startswith(f"query parameter {parameter}=") and FORM in answer["detail"]
    return str(answer["detail"])


def q(value: str) -> str:
    return quote(value, safe="")


@pytest.mark.parametrize("as_of", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+00:01"])
def test_limits_as_of_an_instant_outside_the_years_1_to_9999_in_utc_is_400(desk, bought, as_of):
    detail = refused(desk, "broker", f"/customer/{bought['customer']}/limits?asOf={q(as_of)}", "asOf")
    assert YEARS in detail


def test_limits_as_of_the_last_instant_are_the_windows_of_the_last_day_and_month(desk, bought):
    answer = desk.call("broker", "GET", f"/customer/{bought['customer']}/limits?asOf=9999-12-31T23:59:59Z")
    assert {window["periodKey"] for window in answer["limits"]} == {"9999-12-31", "9999-12"}
    assert all(window["used"] == 0 for window in answer["limits"])  # her buy is in 2026's windows


def test_limits_as_of_the_first_instant_are_before_the_customer_was_registered(desk, bought):
    path = f"/customer/{bought['customer']}/limits?asOf=0001-01-01T00:00:00%2B00:00"
    assert desk.call("broker", "GET", path, status=404)["code"] == "customer_not_found"


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/reserves?asOf=9999-12-31T23:59:59-01:00", "asOf"),
        ("/transactions/custodian?asOf=0001-01-01T00:00:00%2B01:00", "asOf"),
        ("/transactions/custodian?from=20260101", "from"),
        ("/transactions/custodian?to=2026-W01-1", "to"),
        ("/transactions/custodian?to=2026-03-01", "to"),
    ],
)
def test_every_instant_of_the_api_is_read_the_one_way(desk, path, parameter):
    refused(desk, "auditor", path, parameter)


@pytest.mark.parametrize(
    "at", ["0001-01-01T00:00:00Z", "0001-01-01T00:59:00%2B00:59", "9999-12-31T23:59:59.999999Z"]
)
def test_the_first_and_last_instants_are_read_like_any_other(desk, bought, at):
    desk.call("auditor", "GET", f"/reserves?asOf={at}")
    listed = desk.call("auditor", "GET", f"/transactions/custodian?asOf={at}&from={at}&to={at}")
    assert listed["total"] == 0
    everything = desk.call("auditor", "GET", f"/transactions/custodian?from=0001-01-01T00:00:00Z&asOf={at}")
    assert everything["total"] == (1 if at.startswith("9999") else 0)


def test_the_history_at_either_end_of_the_calendar(desk, bought):
    history = f"/transactions/custodian/{bought['transaction']}/history"
    refused(desk, "auditor", f"{history}?asOf={q('9999-12-31T23:59:59-01:00')}", "asOf")
    last = desk.call("auditor", "GET", f"{history}?asOf=9999-12-31T23:59:59.999999Z")
    assert last["transaction"]["transactionCode"] == bought["transaction"]
    first = desk.call("auditor", "GET", f"{history}?asOf=0001-01-01T00:00:00Z", status=404)
    assert "did not exist yet" in first["detail"]


@pytest.fixture
def auditor(client: InProcessClient, desk: RoleCalls) -> Iterator[InProcessClient]:
    signed_in(client, "demo-auditor")
    yield client
    client.cookies.clear()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("reserves?to=9999-12-31", "to must be a day YYYY-MM-DD from 0001-01-01 to 9999-12-30"),
        ("reserves?from=9999-12-01&to=9999-12-31", "to must be a day YYYY-MM-DD"),
        ("volumes?from=9999-12-31", "must not be after"),
        ("transactions?to=9999-12-31", "to must be a day YYYY-MM-DD"),
        ("transactions?from=20260101", "from must be a day YYYY-MM-DD"),
        ("transactions?from=2026-W01-1", "from must be a day YYYY-MM-DD"),
        ("volumes?to=0000-12-31", "to must be a day YYYY-MM-DD"),
    ],
)
def test_a_console_day_that_cannot_be_counted_with_is_refused_with_what_to_type(
    auditor: InProcessClient, query: str, message: str
) -> None:
    answer = auditor.get(f"/console/{query}")
    assert answer.status_code == 400 and message in answer.text
    assert 'id="console-nav"' in answer.text  # a console page, signed in


@pytest.mark.parametrize(
    "query",
    [
        "reserves?to=0001-01-01",  # the default 30 days up to it begin on 0001-01-01
        "volumes?to=0001-01-10",
        "reserves?from=9999-12-01&to=9999-12-30",
        "volumes?from=0001-01-01&to=0001-12-31",
        "transactions?to=9999-12-30",
        "transactions?from=0001-01-01",
    ],
)
def test_the_first_and_last_days_the_console_can_count_with_are_pages_like_any_other(
    auditor: InProcessClient, query: str
) -> None:
    answer = auditor.get(f"/console/{query}")
    assert answer.status_code == 200, answer.text


def test_a_timeline_at_an_instant_outside_the_years_1_to_9999_is_refused(
    auditor: InProcessClient, bought: dict[str, str]
) -> None:
    timeline = f"/console/transactions/{bought['transaction']}"
    answer = auditor.get(timeline, params={"at": "9999-12-31T23:59:59-01:00"})
    assert answer.status_code == 400 and "at must be a UTC time YYYY-MM-DDTHH:MM" in answer.text
    assert "RFC 3339" in answer.text
    assert auditor.get(timeline, params={"at": "2026-03-01 10:00"}).status_code == 400  # not datetime-local
    assert auditor.get(timeline, params={"at": "9999-12-31T23:59"}).status_code == 200
    first = auditor.get(timeline, params={"at": "0001-01-01T00:00:00Z"}).text
    assert "did not exist yet" in first and 'value="0001-01-01T00:00:00Z"' in first  # ISO, UTC, as typed
