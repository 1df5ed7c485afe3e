"""One settings file, two parts: the ledger's sections (application/settings.py) and the API's
(interface/http/settings.py). Each part reads its own keys and leaves the other's alone; loaded as a whole,
the
file is refused for a key neither part declares and for the problems of either part, all reported at once."""

from __future__ import annotations

import pytest

from application.settings import DEFAULT_SETTINGS, SettingsError, decode_settings
from interface.http.settings import (
    ApiSettings,
    HttpSettings,
    RateLimitSettings,
    Role,
    TokenSettings,
    decode_service_settings,
)

DEMO = DEFAULT_SETTINGS.read_text()


def problems_of(text: str) -> list[str]:
    with pytest.raises(SettingsError) as refused:
        decode_service_settings(text, "demo.toml")
    assert refused.value.source == "demo.toml"
    return refused.value.problems


def test_the_demo_settings_load_as_the_ledgers_part_and_the_apis() -> None:
    loaded = decode_service_settings(DEMO)

    assert loaded.ledger == decode_settings(DEMO)
    assert loaded.ledger.partners["demo"].has_payouts
    assert not loaded.ledger.partners["other"].has_payouts
    assert loaded.api.tokens == TokenSettings()
    assert loaded.api.rate_limits == RateLimitSettings(enabled=True, requests_per_second=200, burst=400)
    assert loaded.api.http == HttpSettings(head_timeout_seconds=10, body_timeout_seconds=30)
    assert loaded.api.partners["other"].clients["other-operator"].roles == [Role.OPERATOR]


def test_the_ledgers_part_declares_no_api_section() -> None:
    ledger = decode_settings(DEMO)

    assert not hasattr(ledger, "tokens")
    assert not hasattr(ledger, "rate_limits")
    assert not hasattr(ledger.partners["demo"], "clients")


def test_clients_know_their_partner_and_roles_and_callback_secrets_their_partner() -> None:
    loaded = decode_service_settings(DEMO)

    clients = loaded.clients()

    assert sorted(clients) == [
        "demo-auditor",
        "demo-broker",
        "demo-operator",
        "other-broker",
        "other-operator",
    ]
    assert (clients["other-broker"].partner, clients["other-broker"].roles) == (
        "other",
        frozenset({"broker"}),
    )
    assert clients["demo-auditor"].secret_hash is None
    assert loaded.callback_secrets() == {"demo": None, "other": None}


def test_an_api_section_left_out_gets_its_defaults() -> None:
    start = DEMO.index("[tokens]")
    without = DEMO[:start] + DEMO[DEMO.index("\n[", start) + 1 :]

    assert decode_service_settings(without).api.tokens == ApiSettings().tokens


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("[rate_limits]", "[rate_limit]", "Object contains unknown field `rate_limit` - at `$`"),
        ("[tokens]", "[token]", "Object contains unknown field `token` - at `$`"),
        (
            'features = ["Payouts"]',
            'feature = ["Payouts"]',
            "Object contains unknown field `feature` - at `$.partners.demo`",
        ),
    ],
)
def test_a_key_neither_part_declares_is_refused_by_name(old: str, new: str, problem: str) -> None:
    assert problems_of(DEMO.replace(old, new, 1)) == [problem]


def test_a_value_of_the_wrong_type_in_an_api_section_is_named_by_its_key() -> None:
    [problem] = problems_of(DEMO.replace("lifetime_seconds = 3600", 'lifetime_seconds = "soon"'))

    assert problem == "Expected `int`, got `str` - at `$.tokens.lifetime_seconds`"


def test_a_client_id_used_by_two_partners_is_refused() -> None:
    clash = DEMO + '\n[partners.clash]\nclients.demo-broker = { roles = ["broker"] }\n'

    assert problems_of(clash) == [
        "client id 'demo-broker' is configured for partners 'demo' and 'clash'; client ids must be unique"
    ]


def test_the_problems_of_both_parts_are_reported_together() -> None:
    broken = (
        DEMO.replace('base_currency = "EUR"', 'base_currency = "CHF"')
        .replace('clients.demo-auditor = { roles = ["auditor"] }', "clients.demo-auditor = { roles = [] }")
        .replace("burst = 400", "burst = 0")
    )

    assert problems_of(broken) == [
        "base_currency 'CHF' is not in [currencies]",
        "partners.demo.clients.demo-auditor.roles must not be empty",
        "rate_limits.burst must be at least 1",
    ]


@pytest.mark.parametrize("seconds", ["0", "-1", "inf", "nan"])
def test_a_request_timeout_that_is_not_a_positive_number_of_seconds_is_refused(seconds: str) -> None:
    broken = DEMO.replace("head_timeout_seconds = 10", f"head_timeout_seconds = {seconds}").replace(
        "body_timeout_seconds = 30", f"body_timeout_seconds = {seconds}"
    )

    assert problems_of(broken) == [
        "http.head_timeout_seconds must be a positive number of seconds",
        "http.body_timeout_seconds must be a positive number of seconds",
    ]
