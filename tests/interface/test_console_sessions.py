"""The console's sessions are what they say (issue 35): a console cookie is no API token and an API token no
console cookie, signing out ends a session at once wherever it is checked (the session is a row of
PostgreSQL), the console's forms are taken only from its own origin (a setting, never the Host header), and
every answer under /console, an unknown path and a 429 included, is the console's own page."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from application.credentials import ClientRecord
from application.settings import DEFAULT_SETTINGS, SettingsError
from bench.clock import FakeClock
from interface.cli.serve import listening_origin
from interface.console.sessions import COOKIE
from interface.environment import DEFAULT_CONSOLE_ORIGIN, Environment
from interface.http.auth import Audience, InvalidToken, TokenService
from interface.http.settings import TokenSettings, decode_service_settings
from tests.e2e.support import API_VERSION, client_secrets
from tests.in_process import InProcessClient, in_process_app

client = in_process_app()
FROM_THE_CONSOLE = {"Origin": DEFAULT_CONSOLE_ORIGIN}
SESSIONS = "api.console_sessions"
PAGE = "/console/system"
DEMO_SETTINGS = DEFAULT_SETTINGS.read_text()
ADJUSTMENT = {
    "kind": "OpeningBalance",
    "code": "BTC",
    "amount": 1,
    "toReserve": {"name": "hot-wallet", "type": "HotWallet"},
}


def sign_in(client: InProcessClient, client_id: str, headers: dict[str, str] | None = None) -> httpx.Response:
    secret = client_secrets(client.var)[client_id]
    form = {"client_id": client_id, "client_secret": secret}
    sent = FROM_THE_CONSOLE if headers is None else headers
    return client.post("/console/sign-in", data=form, headers=sent, follow_redirects=False)


@pytest.fixture
def cookie(client: InProcessClient) -> Iterator[str]:
    """The console_session cookie of other-operator, signed in (the client's own cookies cleared)."""
    answer = sign_in(client, "other-operator")
    assert answer.status_code == 303, answer.text
    value = client.cookies.get(COOKIE)
    client.cookies.clear()
    assert value
    yield value


def page_with(client: InProcessClient, cookie: str, path: str = PAGE) -> httpx.Response:
    client.cookies.clear()
    return client.get(path, headers={"Cookie": f"{COOKIE}={cookie}"}, follow_redirects=False)


def sign_out_with(client: InProcessClient, cookie: str) -> httpx.Response:
    client.cookies.clear()
    headers = {**FROM_THE_CONSOLE, "Cookie": f"{COOKIE}={cookie}"}
    return client.post("/console/sign-out", headers=headers, follow_redirects=False)


def adjustment_with(client: InProcessClient, token: str) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token}",
        "api_version": API_VERSION,
        "Idempotency-Key": str(uuid.uuid4()),
    }
    return client.post("/reserves/adjustments", json=ADJUSTMENT, headers=headers)


def recorded_sessions(client: InProcessClient) -> set[str]:
    with psycopg.connect(client.database_url, autocommit=True) as conn:
        return {row[0] for row in conn.execute(f"SELECT id FROM {SESSIONS}")}


# --- a token says what it is for ---


def test_a_console_cookie_sent_as_a_bearer_token_is_refused_by_the_api(
    client: InProcessClient, cookie: str
) -> None:
    answer = adjustment_with(client, cookie)
    assert answer.status_code == 401, answer.text
    assert "another audience" in answer.json()["detail"]
    assert page_with(client, cookie).status_code == 200  # it still opens the console


def test_an_api_token_sent_as_a_console_cookie_is_sent_to_sign_in(client: InProcessClient) -> None:
    token = client.headers_of("demo-auditor")["Authorization"].removeprefix("Bearer ")
    answer = page_with(client, token, "/console/transactions")
    assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"


def test_a_token_verifies_only_for_the_audience_it_was_issued_for() -> None:
    tokens = TokenService(TokenSettings(), b"k" * 32, FakeClock(datetime(2026, 3, 1, tzinfo=UTC)))
    operator = ClientRecord(client_id="o", partner="demo", roles=frozenset({"operator"}), secret_hash="x")
    console = tokens.issue(operator, lifetime_seconds=900, audience=Audience.CONSOLE).access_token
    api = tokens.issue(operator).access_token
    assert tokens.verify(console, Audience.CONSOLE).client_id == tokens.verify(api).client_id == "o"
    with pytest.raises(InvalidToken, match="another audience"):
        tokens.verify(console)
    with pytest.raises(InvalidToken, match="another audience"):
        tokens.verify(api, Audience.CONSOLE)


# --- signing out ends the session at once ---


def test_after_signing_out_the_same_cookie_opens_no_page(client: InProcessClient, cookie: str) -> None:
    assert page_with(client, cookie).status_code == 200
    assert sign_out_with(client, cookie).status_code == 303
    answer = page_with(client, cookie, "/console/reserves")
    assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"


def test_a_session_ended_by_another_worker_is_refused_at_the_next_page(
    client: InProcessClient, cookie: str
) -> None:
    assert page_with(client, cookie).status_code == 200  # this process has checked the token once
    with psycopg.connect(client.database_url, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {SESSIONS}")  # what a sign-out on any worker or replica does
    assert page_with(client, cookie).status_code == 303


def test_signing_out_leaves_no_record_of_the_session_and_signing_in_sweeps_expired_ones(
    client: InProcessClient,
) -> None:
    expired = f"expired-{uuid.uuid4()}"
    with psycopg.connect(client.database_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {SESSIONS} (id, client_id, partner, expires_at) VALUES (%s, %s, %s, %s)",
            (expired, "demo-auditor", "demo", datetime.now(UTC) - timedelta(seconds=1)),
        )
    before = recorded_sessions(client)
    assert sign_in(client, "demo-auditor").status_code == 303
    cookie = client.cookies.get(COOKIE)
    opened = recorded_sessions(client) - before
    assert expired in before and expired not in recorded_sessions(client) and len(opened) == 1
    assert sign_out_with(client, cookie).status_code == 303
    assert not opened & recorded_sessions(client)


# --- the console's forms come from its own origin only ---


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 403),
        ({"Origin": "null"}, 403),
        ({"Host": "attacker.example", "Origin": "http://attacker.example"}, 403),
        ({"Sec-Fetch-Site": "cross-site", "Referer": f"{DEFAULT_CONSOLE_ORIGIN}/console/sign-in"}, 403),
        ({"Sec-Fetch-Site": "same-origin"}, 303),
        ({"Referer": "https://attacker.example/console/sign-in"}, 403),
        ({"Referer": f"{DEFAULT_CONSOLE_ORIGIN}/console/sign-in"}, 303),
        ({"Origin": DEFAULT_CONSOLE_ORIGIN}, 303),
    ],
    ids=[
        "neither Origin, Sec-Fetch-Site nor Referer",
        "Origin null",
        "the Host header's origin",
        "Sec-Fetch-Site cross-site",
        "Sec-Fetch-Site same-origin",
        "another site's Referer",
        "the console's Referer",
        "the console's Origin",
    ],
)
def test_a_sign_in_form_is_taken_only_from_the_consoles_own_origin(
    client: InProcessClient, headers: dict[str, str], status: int
) -> None:
    answer = sign_in(client, "demo-auditor", headers)
    client.cookies.clear()
    assert answer.status_code == status, answer.text
    if status == 403:
        assert 'id="forbidden"' in answer.text and "console_session" not in answer.headers.get(
            "set-cookie", ""
        )


def test_a_sign_out_form_from_another_site_ends_nothing(client: InProcessClient, cookie: str) -> None:
    client.cookies.clear()
    headers = {"Origin": "https://attacker.example", "Cookie": f"{COOKIE}={cookie}"}
    assert client.post("/console/sign-out", headers=headers).status_code == 403
    assert page_with(client, cookie).status_code == 200


def test_settings_whose_console_and_api_audiences_are_the_same_are_refused() -> None:
    same = DEMO_SETTINGS.replace(
        'audience = "broker-ledger-api"', 'audience = "one"\nconsole_audience = "one"'
    )
    with pytest.raises(SettingsError, match="console_audience must differ"):
        decode_service_settings(same)


def test_the_consoles_origin_is_read_from_the_environment_as_browsers_write_it() -> None:
    assert Environment.read({}).console_address == DEFAULT_CONSOLE_ORIGIN == "http://127.0.0.1:8000"
    set_one = Environment.read({"BROKER_LEDGER_CONSOLE_ORIGIN": " HTTPS://Ledger.Example:443/ "})
    assert set_one.console_address == "https://ledger.example"
    for wrong in ("ledger.example", "ftp://ledger.example", "https://ledger.example/console", "http://u@h"):
        with pytest.raises(ValueError, match="BROKER_LEDGER_CONSOLE_ORIGIN"):
            Environment.read({"BROKER_LEDGER_CONSOLE_ORIGIN": wrong})


def test_serve_tells_its_workers_the_origin_it_listens_on() -> None:
    assert listening_origin("127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert listening_origin("0.0.0.0", 9000) == "http://127.0.0.1:9000"
    assert listening_origin("::1", 8080) == "http://[::1]:8080"


# --- every answer under /console is the console's page ---


def console_headers_of(answer: httpx.Response) -> None:
    assert answer.headers["content-type"].startswith("text/html"), answer.text
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/console/no-such-page", 404), ("GET", "/console/transactions/X/Y", 404), ("PUT", PAGE, 405)],
)
def test_an_unknown_console_path_or_method_answers_the_consoles_own_page(
    client: InProcessClient, method: str, path: str, status: int
) -> None:
    answer = client.request(method, path)
    assert answer.status_code == status
    console_headers_of(answer)
    assert "<h1" in answer.text
    if status == 405:
        assert "GET" in answer.headers["allow"]


def test_an_unknown_api_path_still_answers_a_problem(client: InProcessClient) -> None:
    answer = client.get("/no-such-resource")
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/problem+json"


def test_too_many_failed_sign_ins_answer_the_consoles_429_page_with_retry_after(
    client: InProcessClient,
) -> None:
    form = {"client_id": "nobody-at-all", "client_secret": "wrong"}
    answers = [client.post("/console/sign-in", data=form, headers=FROM_THE_CONSOLE) for _ in range(11)]
    assert [answer.status_code for answer in answers] == [401] * 10 + [429]
    refused = answers[-1]
    console_headers_of(refused)
    assert int(refused.headers["retry-after"]) >= 1
    assert 'id="sign-in-error"' in refused.text
